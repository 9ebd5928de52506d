// Command httpprobe is the health check of the sweeper's container image,
// which has no shell and no curl: it requests the URL given as its argument
// and exits 0 when the answer is 2xx, 1 otherwise (the exit codes a Docker or
// compose health check reads).
//
//	httpprobe http://127.0.0.1:9090/healthz
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: httpprobe URL")
		os.Exit(2)
	}
	os.Exit(probe(os.Args[1]))
}

func probe(url string) int {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpprobe:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintln(os.Stderr, "httpprobe:", url, "answered", resp.Status)
		return 1
	}
	return 0
}

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/childproc"
)

// envSweeper, when set in a process's environment, makes SweeperMain run
// B18's sweeper process on the job it holds (JSON) instead of the
// benchmarks.
const envSweeper = "CAIRN_BENCH_SWEEPER"

// sweeperLine starts the line on which a sweeper process prints its figures.
const sweeperLine = "sweeper "

// sweeperJob is what a sweeper process works on: a copy of the harness's
// mirror file, the harness's etcd member and prefix, and the directory of
// the files that hold the store's objects.
type sweeperJob struct {
	Endpoints []string `json:"endpoints"`
	Prefix    string   `json:"prefix"`
	Mirror    string   `json:"mirror"`
	Objects   string   `json:"objects"`
}

// procFig is what a sweeper process measured of itself.
type procFig struct {
	Took       time.Duration `json:"took"`       // the open and the sync
	Reads      int64         `json:"reads"`      // object reads of the sync
	Events     int64         `json:"events"`     // watch events applied
	Candidates int           `json:"candidates"` // the mirror's zeroed keys after it
	Heap       int64         `json:"heap"`       // HeapAlloc after collections, the mirror open and synced
	RSS        int64         `json:"rss"`        // VmRSS at the end
	HWM        int64         `json:"hwm"`        // VmHWM: the peak
	Anon       int64         `json:"anon"`       // RssAnon: of RSS, not files mapped
	Err        string        `json:"err,omitempty"`
}

// SweeperMain runs B18's sweeper process and returns true when the process
// was started as one by the scale harness; it returns false at once
// otherwise. The bench command and the package's test binary call it first
// thing.
//
// The process is a sweeper's steady state with nothing else in it: it opens
// a copy of the harness's mirror file as the cold build left it, syncs it
// through the churn (reading the new roots and chunks from the objects'
// files), takes the candidates, and prints what it measured of its own
// memory: the harness's process also holds the writing store, the in-process
// bucket's keys and the walk's store, so its RSS only bounds a sweeper's.
func SweeperMain() bool {
	job := os.Getenv(envSweeper)
	if job == "" {
		return false
	}
	fig := sweeperProcess(job)
	b, _ := json.Marshal(fig)
	fmt.Printf("%s%s\n", sweeperLine, b)
	os.Exit(0)
	return true
}

// sweeperProcess is the sweeper process's work; an error is in fig.Err.
func sweeperProcess(raw string) (fig procFig) {
	err := func() error {
		var job sweeperJob
		if err := json.Unmarshal([]byte(raw), &job); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cli, err := clientv3.New(clientv3.Config{Endpoints: job.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		b := newFileReader(job.Objects)
		s, err := etcdstore.New(cli, job.Prefix, etcdstore.Options{Options: storeOptions, Objects: b})
		if err != nil {
			return err
		}
		defer s.Close()
		t := time.Now()
		m, err := s.OpenMirror(ctx, job.Mirror)
		if err != nil {
			return err
		}
		defer m.Close()
		if _, err := m.Sync(ctx); err != nil {
			return err
		}
		fig.Candidates = len(m.Zeroed())
		fig.Took = time.Since(t)
		fig.Reads, fig.Events = b.counts().reads(), m.Stats().Events
		// Two collections: bbolt keeps the commit's page buffers in a
		// sync.Pool, which the first only moves to its victim cache.
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fig.Heap = int64(ms.HeapAlloc)
		fig.RSS, fig.HWM, fig.Anon = procMemory()
		runtime.KeepAlive(m)
		return nil
	}()
	if err != nil {
		fig.Err = err.Error()
	}
	return fig
}

// runSweeperProcess runs a sweeper process on job and returns its figures.
func runSweeperProcess(ctx context.Context, job sweeperJob) (procFig, error) {
	exe, err := os.Executable()
	if err != nil {
		return procFig{}, err
	}
	raw, err := json.Marshal(job)
	if err != nil {
		return procFig{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), envSweeper+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := childproc.Start(cmd); err != nil {
		return procFig{}, fmt.Errorf("start the sweeper process: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return procFig{}, fmt.Errorf("the sweeper process: %w", err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), sweeperLine); ok {
			var fig procFig
			if err := json.Unmarshal([]byte(l), &fig); err != nil {
				return procFig{}, fmt.Errorf("the sweeper process's figures: %w", err)
			}
			if fig.Err != "" {
				return fig, fmt.Errorf("the sweeper process: %s", fig.Err)
			}
			return fig, nil
		}
	}
	return procFig{}, errors.New("the sweeper process printed no figures")
}

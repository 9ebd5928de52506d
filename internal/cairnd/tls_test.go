package cairnd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn/remote"
)

// testCA is a certificate authority for the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cairnd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key, PEM-encoded, signed by the CA.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "cairnd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTLSWithClientCertificates: with --tls-client-ca, a client with a
// certificate the CA signed is served, over HTTP/2, and one without is
// refused during the handshake.
func TestTLSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	serverCert, serverKey := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, 3, x509.ExtKeyUsageClientAuth)
	addr, _, _, _ := started(t,
		"--tls-cert", writeFile(t, dir, "server.pem", serverCert), "--tls-key", writeFile(t, dir, "server-key.pem", serverKey),
		"--tls-client-ca", writeFile(t, dir, "ca.pem", ca.pem))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(certs []tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}

	with := client([]tls.Certificate{pair})
	if _, err := remote.New("https://"+addr, remote.Options{Token: "token-a", HTTPClient: with}).GetHead(ctx, "t"); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
	res, err := with.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", res.Proto)
	}

	without := client(nil)
	if _, err := remote.New("https://"+addr, remote.Options{Token: "token-a", HTTPClient: without}).GetHead(ctx, "t"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// TestPlainHTTP2: without TLS, cairnd serves HTTP/1.1 and HTTP/2 with prior
// knowledge (h2c), which gRPC clients without TLS speak: a client that speaks
// only unencrypted HTTP/2 gets answers over HTTP/2, through the gRPC
// protocol too.
func TestPlainHTTP2(t *testing.T) {
	addr, _, _, _ := started(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	h2 := &http.Client{Transport: tr}

	res, err := h2.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusOK {
		t.Errorf("/healthz over h2c: %s %s, want HTTP/2 and 200", res.Proto, res.Status)
	}
	s := remote.New("http://"+addr, remote.Options{Token: "token-a", HTTPClient: h2, ClientOptions: []connect.ClientOption{connect.WithGRPC()}})
	if _, err := s.GetHead(ctx, "t"); err != nil {
		t.Fatalf("gRPC over h2c: %v", err)
	}

	res, err = http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 1 {
		t.Errorf("a plain HTTP client got %s, want HTTP/1.1", res.Proto)
	}
}

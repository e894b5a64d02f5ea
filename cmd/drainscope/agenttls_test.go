package main

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
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// issue writes a CA and a certificate it signs for 127.0.0.1 into dir,
// as ca.crt, tls.crt and tls.key: the files the chart's Secret (or
// cert-manager's) holds.
func issue(t *testing.T, dir, name string) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(file, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("tls.crt", "CERTIFICATE", srvDER)
	write("tls.key", "EC PRIVATE KEY", keyDER)
}

type oneNode struct{}

func (oneNode) Authenticate(_ context.Context, tok string) (relay.Agent, error) {
	if tok == "agent-token" {
		return relay.Agent{Node: "node-a", PodNamespace: "drainscope", Pod: "agent-a"}, nil
	}
	return relay.Agent{}, &relay.AuthError{Status: http.StatusUnauthorized, Msg: "not valid"}
}

// TestAgentsOverTLS: --agent-listen serves the agents' endpoint, and only
// it, over TLS; an agent with --server https://… and --server-ca stores
// through it, one without the CA is refused by its own TLS check; a
// renewed certificate (a new CA, as a re-issued chart Secret has) is read
// from the files without a restart.
func TestAgentsOverTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	issue(t, dir, "first")
	keyPairCheck = 0 // look at the files at every handshake
	defer func() { keyPairCheck = 10 * time.Second }()
	kp, err := loadKeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	stop, err := serveAgents(ctx, addr, kp, &relay.Handler{Store: st, Auth: oneNode{}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("agent-token"), 0o600)
	post := func(ca string, n int) error {
		cl, err := openAgentStore(ctx, "", "https://"+addr, tok, ca, &retentionFlag{})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		evs := make([]event.Event, n)
		for i := range evs {
			evs[i] = event.Event{Time: time.Now().Add(-time.Duration(i+n) * time.Millisecond).UnixNano(), Kind: event.Signal,
				Source: event.SourceKernel, Node: "node-a", PID: int32(100 + n), Signal: 15}
			evs[i].Seal()
		}
		return cl.Append(ctx, evs)
	}
	// Kept aside: the first CA, before the renewal overwrites it.
	first, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	firstCA := filepath.Join(t.TempDir(), "first-ca.crt")
	os.WriteFile(firstCA, first, 0o600)

	if err := post(firstCA, 3); err != nil {
		t.Fatalf("an agent with the server's CA: %v", err)
	}
	if err := post("", 1); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an agent without the server's CA: %v, want its TLS check to refuse the certificate", err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tlsTrusting(t, firstCA)}}).Get("https://" + addr + "/api/v1/rollouts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the UI's API on the agents' listener: %d, want 404", resp.StatusCode)
	}

	issue(t, dir, "renewed")
	if err := post(filepath.Join(dir, "ca.crt"), 5); err != nil {
		t.Errorf("after the renewal, an agent with the new CA: %v", err)
	}
	if err := post(firstCA, 1); err == nil {
		t.Errorf("after the renewal, an agent with the old CA only was not refused: the old certificate is still served")
	}
	evs, err := store.Events(ctx, st, store.Query{Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 8 {
		t.Errorf("stored %d events, want 3 before the renewal and 5 after", len(evs))
	}
}

func tlsTrusting(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool}
}

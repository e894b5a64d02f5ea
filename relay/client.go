package relay

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// DefaultTokenFile is where kubelet mounts a pod's projected service
// account token.
const DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Client is the agent's side: a store.Store that writes through the
// server. Only Append works; the agent never reads. Wrapped in a
// store.Writer it inherits the agent's batching, backoff, bounded buffer
// and drop counters: a batch the server refuses for what it says (400,
// 403, 413) is a row-level error (store.ErrRefused), which the Writer
// splits to drop only the events refused; any other failure (the server
// away, 429, 503, 401 while a rotated token is not yet read) keeps the
// batch for a retry.
//
// It sends JSON until the server's answer names the wire form
// (event.WireType) in its Accept-Post header, and the wire form from then
// on: an agent upgraded before its server keeps working, and one whose
// server went back to a version without it goes back to JSON.
type Client struct {
	url       string
	tokenFile string
	http      *http.Client
	wire      atomic.Bool // the server takes the wire form
}

// NewClient writes to the server at base (http(s)://host[:port][/prefix]),
// with the token read from tokenFile at each batch (kubelet rotates it).
// hc nil: a client with a 30 s timeout.
func NewClient(base, tokenFile string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port]", base)
	}
	if tokenFile == "" {
		tokenFile = DefaultTokenFile
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{url: strings.TrimSuffix(base, "/") + EventsPath, tokenFile: tokenFile, http: hc}, nil
}

// gzipWriters are reused: a new gzip writer allocates hundreds of KiB,
// once per batch, which a process of many clients (drainscope lab
// simulate) pays thousands of times a second.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid
	return zw
}}

// Append posts batch: in the wire form, uncompressed, when the server has
// said it takes it, else as gzip-compressed JSON. The body streams as it
// is encoded, so that the server decodes and checks the batch's first
// events while the agent encodes its last.
func (c *Client) Append(ctx context.Context, batch []event.Event) error {
	tok, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("reading the agent token: %w", err)
	}
	wire := c.wire.Load()
	pr, pw := io.Pipe()
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		pw.CloseWithError(encode(pw, batch, wire))
	}()
	// The encoder reads batch: Append returns only once it has stopped,
	// its writes failing if the server answered before reading it all,
	// so that the caller may reuse batch at once.
	defer func() { pr.Close(); <-encoded }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, pr)
	if err != nil {
		return err
	}
	if wire {
		req.Header.Set("Content-Type", event.WireType)
	} else {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("posting %d events: %w", len(batch), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	c.wire.Store(takesWire(resp.Header))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	if wire && !c.wire.Load() {
		// A server that no longer takes the wire form refuses the body,
		// not the events: they go again, as JSON.
		return fmt.Errorf("server answered %s to the wire form, which it no longer takes; sending JSON", resp.Status)
	}
	var ref Refusal
	if json.Unmarshal(msg, &ref) != nil || ref.Error == "" {
		ref.Error = strings.TrimSpace(string(msg))
	}
	err = fmt.Errorf("server answered %s: %s", resp.Status, ref.Error)
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", store.ErrRefused, err)
	}
	return err
}

// takesWire reports whether an answer's Accept-Post names the wire form.
func takesWire(h http.Header) bool {
	for _, v := range h.Values("Accept-Post") {
		for t := range strings.SplitSeq(v, ",") {
			if mediaType(t) == event.WireType {
				return true
			}
		}
	}
	return false
}

// wireChunk is how many events are encoded before their bytes are handed
// to the connection.
const wireChunk = 256

// encode writes batch to w in the wire form, or as gzip-compressed JSON.
func encode(w io.Writer, batch []event.Event, wire bool) error {
	if !wire {
		zw := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		zw.Reset(w)
		if err := json.NewEncoder(zw).Encode(Batch{Events: batch}); err != nil {
			return fmt.Errorf("encoding a batch: %w", err)
		}
		return zw.Close()
	}
	buf := wireBuffers.Get().(*[]byte)
	defer wireBuffers.Put(buf)
	b := event.AppendWireHeader((*buf)[:0], len(batch))
	for len(batch) > 0 {
		n := min(len(batch), wireChunk)
		b = event.AppendWire(b, batch[:n])
		batch = batch[n:]
		if _, err := w.Write(b); err != nil {
			return err
		}
		b = b[:0]
	}
	*buf = b
	return nil
}

// wireBuffers hold a chunk of a batch's wire form.
var wireBuffers = sync.Pool{New: func() any { return new([]byte) }}

var errWriteOnly = errors.New("the agent's store is the server's endpoint: it takes writes only")

func (c *Client) Scan(context.Context, store.Query, func(*event.Event) error) error {
	return errWriteOnly
}
func (c *Client) StateAt(context.Context, int64, string) ([]event.Event, error) {
	return nil, errWriteOnly
}
func (c *Client) Prune(context.Context, int64) (int64, error) { return 0, errWriteOnly }
func (c *Client) Version(context.Context) (int, error)        { return 0, errWriteOnly }
func (c *Client) Describe() string                            { return "server " + c.url }
func (c *Client) Close() error                                { c.http.CloseIdleConnections(); return nil }

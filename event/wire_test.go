package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drainscope/drainscope/event"
)

// wireEvents are events with every field set one way or another: both
// address families, none, negative numbers, attributes, invalid UTF-8.
func wireEvents() []event.Event {
	evs := []event.Event{
		{Time: 1_700_000_000_123_456_789, Kind: event.Signal, Node: "node-a", Source: event.SourceKernel,
			Pod:      event.PodRef{Namespace: "shop", Name: "web-1", UID: "0b7c-uid", Container: "app"},
			Workload: event.Workload{Kind: "Deployment", Name: "web"},
			PID:      4242, PeerPID: 1, Comm: "server", PeerComm: "containerd-shim", Signal: 15},
		{Time: -5, Kind: event.RSTSent, Node: "node-b", Source: event.SourceKernel,
			Local:  netip.MustParseAddrPort("10.0.0.7:8080"),
			Remote: netip.MustParseAddrPort("[fd00::1:2]:41000"), NetNS: 1<<63 + 9,
			Code: -1, Duration: -3, Reason: "rst \xff\xfe after exit", Flags: event.FlagAtExit | event.FlagUnreadData,
			Attrs: map[string]string{"b": "2", "a": "", "proxy": "envoy", "ünï": "\x80"}},
		{Kind: event.EndpointNotReady, Source: event.SourceWatcher, Service: "shop/web", Slice: "web-x1",
			Local: netip.MustParseAddrPort("[::ffff:10.1.2.3]:80")},
		{},
	}
	for i := range evs {
		evs[i].Seal()
	}
	return evs
}

func wireBody(evs []event.Event) []byte {
	return event.AppendWire(event.AppendWireHeader(nil, len(evs)), evs)
}

func wireRoundTrip(t testing.TB, evs []event.Event) []event.Event {
	t.Helper()
	body := wireBody(evs)
	rd, err := event.NewWireReader(bytes.NewReader(body), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Count() != len(evs) {
		t.Fatalf("the header announces %d events, sent %d", rd.Count(), len(evs))
	}
	var out []event.Event
	for {
		var e event.Event
		err := rd.Next(&e)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("event %d: %v", len(out), err)
		}
		out = append(out, e)
	}
}

// TestWireCarriesWhatJSONCarries: the wire form and encoding/json's form
// of Event give the server the same events, invalid UTF-8 included.
func TestWireCarriesWhatJSONCarries(t *testing.T) {
	evs := wireEvents()
	raw, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	var viaJSON []event.Event
	if err := json.Unmarshal(raw, &viaJSON); err != nil {
		t.Fatal(err)
	}
	viaWire := wireRoundTrip(t, evs)
	if len(viaWire) != len(evs) {
		t.Fatalf("%d events through the wire form, sent %d", len(viaWire), len(evs))
	}
	for i := range evs {
		if !reflect.DeepEqual(viaWire[i], viaJSON[i]) {
			t.Errorf("event %d:\n wire %+v\n json %+v", i, viaWire[i], viaJSON[i])
		}
	}
	// The wire form carries a string's bytes as they are, valid or not;
	// sealing (which the server does to every event) cleans them.
	raw0 := []event.Event{{Comm: "a\xff\xfeb", Attrs: map[string]string{"k\x80": "v\xc0"}}}
	got := wireRoundTrip(t, raw0)[0]
	if !reflect.DeepEqual(got, raw0[0]) {
		t.Errorf("invalid UTF-8 arrived as %q, %q; sent %q, %q", got.Comm, got.Attrs, raw0[0].Comm, raw0[0].Attrs)
	}
	if got.Seal(); !utf8.ValidString(got.Comm) || got.Attrs[event.AttrCommRaw] != "61fffe62" {
		t.Errorf("sealed, the command name is %q, %q", got.Comm, got.Attrs)
	}
	if viaWire[0].ID != evs[0].ID {
		t.Errorf("a valid event's ID changed on the wire")
	}
}

// TestWireRefusesWhatItCannotRead: each malformed body names what is
// wrong, and a record past the bound is refused before it is read.
func TestWireRefusesWhatItCannotRead(t *testing.T) {
	one := wireBody(wireEvents()[1:2])
	read := func(body []byte, max int) error {
		rd, err := event.NewWireReader(bytes.NewReader(body), max)
		if err != nil {
			return err
		}
		for {
			var e event.Event
			if err := rd.Next(&e); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	if err := read(one, 1<<20); err != nil {
		t.Fatalf("a good body: %v", err)
	}
	corrupt := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(one)) }
	hdr := len(event.WireMagic) + 4 + 4
	for _, c := range []struct {
		name string
		body []byte
		max  int
		want string
	}{
		{"JSON", []byte(`{"events":[]}`), 1 << 20, "does not start with the wire form's header"},
		{"empty", nil, 1 << 20, "reading the wire form's header"},
		{"past the bound", one, 20, "past the bound of 20"},
		{"cut in a length", one[:hdr-2], 1 << 20, "inside a record's length"},
		{"cut before a record", wireBody(wireEvents()[1:3])[:len(one)], 1 << 20, "ends after 1 of the 2 events its header announced"},
		{"more than announced", append(one, one[hdr-4:]...), 1 << 20, "more events than the 1 the header announced"},
		{"cut in a record", one[:len(one)-3], 1 << 20, "inside a record of"},
		{"a string past the record", corrupt(func(b []byte) []byte {
			b[bytes.Index(b, []byte(event.RSTSent))-1] = 0x7f // the kind's length
			return b
		}), 1 << 20, "field kind: a string of 127 bytes"},
		{"bytes left over", corrupt(func(b []byte) []byte {
			b[hdr-1]++ // the record's length one more: the next byte is read in
			return append(b, 0)
		}), 1 << 20, "1 bytes after the last field"},
		{"an address of 5 bytes", corrupt(func(b []byte) []byte {
			i := bytes.Index(b, []byte{4, 10, 0, 0, 7})
			b[i] = 5
			return b
		}), 1 << 20, "field local: an address of 5 bytes"},
	} {
		err := read(c.body, c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
		if c.name == "past the bound" && !errors.Is(err, event.ErrWireTooLarge) {
			t.Errorf("%s: %v is not ErrWireTooLarge", c.name, err)
		}
	}
}

// FuzzWireReader: no body makes the reader panic or hold more than its
// bound; whatever it reads, written again, reads back the same.
func FuzzWireReader(f *testing.F) {
	f.Add(wireBody(wireEvents()))
	f.Add([]byte(event.WireMagic + "\x00\x00\x00\x01\x00\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, body []byte) {
		rd, err := event.NewWireReader(bytes.NewReader(body), 4096)
		if err != nil {
			return
		}
		var got []event.Event
		for {
			var e event.Event
			if err := rd.Next(&e); err != nil {
				break
			}
			got = append(got, e)
		}
		again := wireRoundTrip(t, got)
		if len(got) > 0 && !reflect.DeepEqual(again, got) {
			t.Fatalf("read %+v, written and read again %+v", got, again)
		}
	})
}

func BenchmarkWireVersusJSON(b *testing.B) {
	evs := make([]event.Event, 0, 5000)
	for len(evs) < cap(evs) {
		evs = append(evs, wireEvents()[:3]...)
	}
	body := wireBody(evs)
	raw, _ := json.Marshal(evs)
	b.Run("wire", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			wireRoundTrip(b, evs)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for range b.N {
			raw, _ := json.Marshal(evs)
			var out []event.Event
			if err := json.Unmarshal(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package ebpf

import (
	"encoding/hex"
	"net/netip"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// rawBytes returns the in-memory bytes of r, as the kernel writes them.
func rawBytes(r *probesEvent) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(r)), unsafe.Sizeof(*r))...)
}

func comm(s string) (c [16]int8) {
	for i := 0; i < len(s) && i < 15; i++ {
		c[i] = int8(s[i])
	}
	return c
}

func addr16(s string) (b [16]uint8) {
	a := netip.MustParseAddr(s)
	if a.Is4() {
		a4 := a.As4()
		copy(b[:], a4[:])
		return b
	}
	return a.As16()
}

// TestDecodeRawRoundTrip checks that the decoder's offsets match the Go
// struct's memory layout (TestLayout checks the Go struct against C).
func TestDecodeRawRoundTrip(t *testing.T) {
	in := probesEvent{
		TsNs: 0x0102030405060708, CgroupId: 0x1112131415161718, Netns: 0x2122232425262728,
		Pid: 0x31323334, Tid: 0x41424344, PeerPid: 0x51525354, Signal: -7, Code: -9,
		Flags: 0x61626364, Reason: 0x7172, Kind: 0x73, Family: 0x74, Lport: 0x8182, Rport: 0x9192,
		Laddr: addr16("2001:db8::1"), Raddr: addr16("2001:db8::2"),
		Comm: comm("server"), PeerComm: comm("containerd-shim"), OldState: 0xa1, NewState: 0xa2, IdleUs: 0xb1b2b3b4,
	}
	var out probesEvent
	if err := decodeRaw(rawBytes(&in), &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("decoded %+v\nwant    %+v", out, in)
	}
	if err := decodeRaw(make([]byte, eventSize-1), &out); err == nil {
		t.Error("short record decoded without error")
	}
}

func TestFill(t *testing.T) {
	reasons := []string{"not_specified", "no_socket", "tcp_invalid_ack_sequence", 8: "tcp_abort_on_data", 11: "tcp_abort_on_close"}
	d := decoder{node: "n1", rstReasons: reasons}
	attrs := map[string]string{event.AttrClockUncertainty: "40"}
	tests := []struct {
		name string
		raw  probesEvent
		want event.Event
	}{
		{
			name: "sigterm from the runtime",
			raw: probesEvent{Kind: kindSignal, Pid: 100, PeerPid: 7, Signal: 15, Code: 0,
				Comm: comm("app"), PeerComm: comm("containerd-shim")},
			want: event.Event{Kind: event.Signal, PID: 100, Comm: "app", PeerPID: 7, PeerComm: "containerd-shim",
				Signal: 15, Reason: "delivered"},
		},
		{
			name: "ignored signal",
			raw:  probesEvent{Kind: kindSignal, Pid: 100, Signal: 15, Code: 1, Comm: comm("app")},
			want: event.Event{Kind: event.Signal, PID: 100, Comm: "app", Signal: 15, Reason: "ignored"},
		},
		{
			name: "exit code",
			raw:  probesEvent{Kind: kindExit, Pid: 100, Code: 3, Comm: comm("app")},
			want: event.Event{Kind: event.ProcessExit, PID: 100, Comm: "app", Code: 3},
		},
		{
			name: "the container's main process exits",
			raw:  probesEvent{Kind: kindExit, Pid: 100, Code: 2, Flags: flagMain, Comm: comm("app")},
			want: event.Event{Kind: event.ProcessExit, PID: 100, Comm: "app", Code: 2, Flags: event.FlagMain},
		},
		{
			name: "killed",
			raw:  probesEvent{Kind: kindExit, Pid: 100, Signal: 9, Flags: flagSignaled, Comm: comm("app")},
			want: event.Event{Kind: event.ProcessExit, PID: 100, Comm: "app", Signal: 9},
		},
		{
			name: "core dumped",
			raw:  probesEvent{Kind: kindExit, Pid: 100, Signal: 11, Flags: flagSignaled | flagCore, Comm: comm("app")},
			want: event.Event{Kind: event.ProcessExit, PID: 100, Comm: "app", Signal: 11, Reason: ReasonCoreDumped},
		},
		{
			name: "listener closed at exit",
			raw: probesEvent{Kind: kindListenClose, Pid: 100, Flags: flagOwner | flagAtExit, Comm: comm("app"),
				Netns: 4026532000, Family: afInet6, Lport: 8080},
			want: event.Event{Kind: event.ListenerClosed, PID: 100, Comm: "app", Flags: event.FlagAtExit,
				NetNS: 4026532000, Local: netip.MustParseAddrPort("[::]:8080")},
		},
		{
			name: "peer closed, not the owner's context",
			raw: probesEvent{Kind: kindConnClose, Pid: 555, Flags: flagPeer, Comm: comm("other"), Netns: 9,
				Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8080, Raddr: addr16("10.0.0.9"), Rport: 40000},
			want: event.Event{Kind: event.ConnClosed, Reason: ReasonPeer, NetNS: 9,
				Local: netip.MustParseAddrPort("10.0.0.2:8080"), Remote: netip.MustParseAddrPort("10.0.0.9:40000")},
		},
		{
			name: "v4-mapped peer of a dual-stack socket",
			raw: probesEvent{Kind: kindConnClose, Pid: 100, Flags: flagOwner, Comm: comm("app"),
				Family: afInet6, Laddr: addr16("::ffff:10.0.0.2"), Lport: 8080, Raddr: addr16("::ffff:10.0.0.9"), Rport: 40000},
			want: event.Event{Kind: event.ConnClosed, PID: 100, Comm: "app", Reason: ReasonLocal,
				Local: netip.MustParseAddrPort("10.0.0.2:8080"), Remote: netip.MustParseAddrPort("10.0.0.9:40000")},
		},
		{
			name: "closed at exit 25 ms after its last packet",
			raw: probesEvent{Kind: kindConnClose, Pid: 100, Flags: flagOwner | flagAtExit, Comm: comm("app"), IdleUs: 25_001,
				Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8080, Raddr: addr16("10.0.0.9"), Rport: 40000},
			want: event.Event{Kind: event.ConnClosed, PID: 100, Comm: "app", Reason: ReasonLocal, Flags: event.FlagAtExit,
				Duration: int64(25 * time.Millisecond),
				Local:    netip.MustParseAddrPort("10.0.0.2:8080"), Remote: netip.MustParseAddrPort("10.0.0.9:40000")},
		},
		{
			name: "refused",
			raw: probesEvent{Kind: kindRefused, Pid: 555, Flags: flagNoSocket | flagHaveReason, Reason: rstReasonNoSocket,
				Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8081, Raddr: addr16("10.0.0.9"), Rport: 40001},
			want: event.Event{Kind: event.ConnRefused, Reason: "no_socket",
				Local: netip.MustParseAddrPort("10.0.0.2:8081"), Remote: netip.MustParseAddrPort("10.0.0.9:40001")},
		},
		{
			name: "refused on a kernel without reasons",
			raw: probesEvent{Kind: kindRefused, Flags: flagNoSocket,
				Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8081, Raddr: addr16("10.0.0.9"), Rport: 40001},
			want: event.Event{Kind: event.ConnRefused, Reason: ReasonNoSocket,
				Local: netip.MustParseAddrPort("10.0.0.2:8081"), Remote: netip.MustParseAddrPort("10.0.0.9:40001")},
		},
		{
			name: "reset with unread data at exit",
			raw: probesEvent{Kind: kindRSTSent, Pid: 100, Flags: flagOwner | flagAtExit | flagHaveReason, Reason: rstReasonAbortOnClose,
				Comm: comm("app"), Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8080, Raddr: addr16("10.0.0.9"), Rport: 40000},
			want: event.Event{Kind: event.RSTSent, PID: 100, Comm: "app", Reason: "tcp_abort_on_close",
				Flags: event.FlagAtExit | event.FlagUnreadData,
				Local: netip.MustParseAddrPort("10.0.0.2:8080"), Remote: netip.MustParseAddrPort("10.0.0.9:40000")},
		},
		{
			name: "reset received",
			raw: probesEvent{Kind: kindRSTRecv, Pid: 100, Flags: flagOwner, Comm: comm("app"),
				Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8080, Raddr: addr16("10.0.0.9"), Rport: 40000},
			want: event.Event{Kind: event.RSTReceived, PID: 100, Comm: "app",
				Local: netip.MustParseAddrPort("10.0.0.2:8080"), Remote: netip.MustParseAddrPort("10.0.0.9:40000")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got event.Event
			got.Reason = "stale" // fill must reset the reused event
			if err := d.fill(&got, &tt.raw, 1234, attrs); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Time, want.Node, want.Source, want.Attrs = 1234, "n1", event.SourceKernel, attrs
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %s\nwant %s", describe(&got), describe(&want))
			}
		})
	}
	var e event.Event
	if err := d.fill(&e, &probesEvent{Kind: 0}, 1, nil); err == nil {
		t.Error("kind 0 accepted")
	}
	if err := d.fill(&e, &probesEvent{Kind: kindMax}, 1, nil); err == nil {
		t.Error("kind out of range accepted")
	}
}

// TestLayout checks that the Go struct bpf2go generated has the size and
// field offsets of the C struct event, read from the object's BTF, and the
// values the decoder and the C code rely on.
func TestLayout(t *testing.T) {
	spec, err := loadProbes()
	if err != nil {
		t.Fatal(err)
	}
	var cs *btf.Struct
	if err := spec.Types.TypeByName("event", &cs); err != nil {
		t.Fatal(err)
	}
	gt := reflect.TypeOf(probesEvent{})
	if cs.Size != uint32(gt.Size()) || gt.Size() != 128 {
		t.Errorf("struct event: C %d bytes, Go %d bytes, want 128", cs.Size, gt.Size())
	}
	var goFields []reflect.StructField
	for i := 0; i < gt.NumField(); i++ {
		if f := gt.Field(i); f.Name != "_" {
			goFields = append(goFields, f)
		}
	}
	if len(goFields) != len(cs.Members) {
		t.Fatalf("C has %d members, Go %d fields", len(cs.Members), len(goFields))
	}
	for i, m := range cs.Members {
		f := goFields[i]
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(m.Offset.Bytes()) != uint32(f.Offset) || uintptr(size) != f.Type.Size() {
			t.Errorf("%s/%s: C offset %d size %d, Go offset %d size %d",
				m.Name, f.Name, m.Offset.Bytes(), size, f.Offset, f.Type.Size())
		}
	}
	// The offsets decodeRaw reads.
	want := map[string]uintptr{
		"TsNs": 0, "CgroupId": 8, "Netns": 16, "Pid": 24, "Tid": 28, "PeerPid": 32, "Signal": 36,
		"Code": 40, "Flags": 44, "Reason": 48, "Kind": 50, "Family": 51, "Lport": 52, "Rport": 54,
		"Laddr": 56, "Raddr": 72, "Comm": 88, "PeerComm": 104, "OldState": 120, "NewState": 121, "IdleUs": 124,
	}
	for name, off := range want {
		f, ok := gt.FieldByName(name)
		if !ok || f.Offset != off {
			t.Errorf("field %s at %d, decoder reads it at %d", name, f.Offset, off)
		}
	}
	if n := spec.Maps["counters"].MaxEntries; n != uint32(kindMax)*2 {
		t.Errorf("counters map has %d entries, want %d", n, kindMax*2)
	}
}

func TestRSTReasonNames(t *testing.T) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		testenv.Unavailable(t, "no kernel BTF: "+err.Error())
	}
	hasArg, names := rstReasons(kernel)
	t.Logf("tcp_send_reset passes a reason: %v; %d names", hasArg, len(names))
	if !hasArg {
		return
	}
	if names[rstReasonNoSocket] != "no_socket" || names[rstReasonAbortOnClose] != "tcp_abort_on_close" {
		t.Errorf("reason names: %q", names)
	}
}

func TestCommCache(t *testing.T) {
	var c commCache
	a := comm("nginx")
	if s := c.get(&a); s != (commName{name: "nginx"}) {
		t.Errorf("got %q", s)
	}
	full := [16]int8{}
	for i := range full {
		full[i] = 'x' // no terminator: the kernel truncates at 15 + NUL, but be safe
	}
	if s := c.get(&full).name; len(s) != 16 {
		t.Errorf("unterminated name: %q", s)
	}
	if n := testing.AllocsPerRun(100, func() { c.get(&a) }); n != 0 {
		t.Errorf("cached lookup allocates %v times", n)
	}
}

// A name the kernel cut inside a multi-byte character decodes to valid
// UTF-8, U+FFFD for the stray byte, and keeps the kernel's bytes in an
// attribute, without touching the map the other events share.
func TestCommCutMidCharacter(t *testing.T) {
	name := "servidor-canción" // the kernel keeps 15 bytes, the first of "ó"'s two
	raw := comm(name)
	kept := name[:15]
	if utf8.ValidString(kept) {
		t.Fatalf("test name %q is not cut inside a character", kept)
	}
	d := decoder{node: "n1"}
	attrs := map[string]string{event.AttrClockUncertainty: "40"}
	var e event.Event
	sig := probesEvent{Kind: kindSignal, Pid: 100, PeerPid: 7, Signal: 15, Comm: raw, PeerComm: raw}
	if err := d.fill(&e, &sig, 1234, attrs); err != nil {
		t.Fatal(err)
	}
	want := "servidor-canci\uFFFD"
	if e.Comm != want || e.PeerComm != want {
		t.Errorf("comm %q, peer comm %q; want %q", e.Comm, e.PeerComm, want)
	}
	hexKept := hex.EncodeToString([]byte(kept))
	if e.Attrs[event.AttrCommRaw] != hexKept || e.Attrs[event.AttrPeerCommRaw] != hexKept {
		t.Errorf("attrs %v; want the raw bytes %s kept", e.Attrs, hexKept)
	}
	if e.Attrs[event.AttrClockUncertainty] != "40" {
		t.Errorf("attrs %v lost the shared ones", e.Attrs)
	}
	if len(attrs) != 1 {
		t.Errorf("the shared attrs map was changed: %v", attrs)
	}
	before := e.Clone()
	e.Seal()
	if !reflect.DeepEqual(before.Attrs, e.Attrs) || e.Comm != before.Comm {
		t.Errorf("sealing changed a decoded event: %s", describe(&e))
	}
	// A valid name leaves the shared map in place.
	exit := probesEvent{Kind: kindExit, Pid: 100, Comm: comm("server")}
	if err := d.fill(&e, &exit, 1234, attrs); err != nil {
		t.Fatal(err)
	}
	if e.Comm != "server" || reflect.ValueOf(e.Attrs).UnsafePointer() != reflect.ValueOf(attrs).UnsafePointer() {
		t.Errorf("a valid name: comm %q, attrs %v (a copy)", e.Comm, e.Attrs)
	}
}

func TestWallClock(t *testing.T) {
	c := newWallClock(0) // re-sample on every call
	off1, unc := c.offset.Load(), c.uncertainty.Load()
	if unc <= 0 {
		t.Errorf("uncertainty %d ns", unc)
	}
	before := wallNow()
	var m unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	w := c.Wall(uint64(m.Nano()))
	after := wallNow()
	slack := c.uncertainty.Load() + 1e6
	if w < before-slack || w > after+slack {
		t.Errorf("converted %d outside [%d, %d]", w, before, after)
	}
	// Offsets sampled moments apart agree within their uncertainties (each
	// sample is off by at most its own; the clocks do not slew measurably
	// in between).
	if d, u := c.offset.Load()-off1, unc+c.uncertainty.Load(); d < -u || d > u {
		t.Errorf("offset moved by %d ns between samples, more than their uncertainties (%d ns)", d, u)
	}
	if c.attrs[event.AttrClockUncertainty] == "" {
		t.Error("no uncertainty attribute")
	}
}

func btfKernel() (*btf.Spec, error) { return btf.LoadKernelSpec() }

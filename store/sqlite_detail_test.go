package store

import (
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
)

// Corrupt details must give an error, never a panic or a wrong event.
func FuzzUnpackDetail(f *testing.F) {
	for _, e := range eventgen.Rollout(50, day0, 30, "checkout") {
		_, buf := appendSQLiteRow(nil, nil, &e)
		f.Add(buf)
	}
	f.Add([]byte{detailVersion, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, d []byte) {
		var e event.Event
		_ = unpackDetail(d, &e)
	})
}

func TestDetailRejectsTruncation(t *testing.T) {
	e := eventgen.Rollout(40, day0, 31, "checkout")[39]
	e.Attrs = map[string]string{"k": "v"}
	_, buf := appendSQLiteRow(nil, nil, &e)
	for n := 0; n < len(buf); n++ {
		var got event.Event
		if err := unpackDetail(buf[:n], &got); err == nil {
			t.Fatalf("detail cut to %d of %d bytes decoded without error", n, len(buf))
		}
	}
}

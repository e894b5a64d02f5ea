package ingest

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress holds counters an import updates as it goes, for a display to
// read from another goroutine.
type Progress struct {
	mu    sync.Mutex
	name  string
	size  int64 // of the current input in bytes, 0 when unknown
	began time.Time

	bytes    atomic.Int64 // of the current input (compressed, if it is)
	lines    atomic.Int64 // over all inputs
	failures atomic.Int64
	rejected atomic.Int64
}

// SetSize announces the size of the next input, 0 when unknown (stdin).
func (p *Progress) SetSize(n int64) {
	p.mu.Lock()
	p.size = n
	p.mu.Unlock()
}

func (p *Progress) start(name string) {
	p.mu.Lock()
	p.name = name
	if p.began.IsZero() {
		p.began = time.Now()
	}
	p.mu.Unlock()
	p.bytes.Store(0)
}

// Line renders the progress as one line of at most width columns.
func (p *Progress) Line(width int) string {
	p.mu.Lock()
	name, size, began := p.name, p.size, p.began
	p.mu.Unlock()
	n, lines := p.bytes.Load(), p.lines.Load()
	rate := ""
	if el := time.Since(began).Seconds(); el > 0.5 {
		rate = fmt.Sprintf("  %s lines/s", si(float64(lines)/el))
	}
	counts := fmt.Sprintf("  %s lines  %s failed  %s rejected%s", si(float64(lines)), si(float64(p.failures.Load())),
		si(float64(p.rejected.Load())), rate)
	name = filepath.Base(name)
	var head string
	if size > 0 {
		frac := min(float64(n)/float64(size), 1)
		barW := 20
		fill := int(frac * float64(barW))
		head = fmt.Sprintf("%s [%s%s] %3.0f%% %s/%s", name, strings.Repeat("=", fill), strings.Repeat(" ", barW-fill),
			frac*100, bytesSI(n), bytesSI(size))
	} else {
		head = fmt.Sprintf("%s %s", name, bytesSI(n))
	}
	s := head + counts
	if width > 0 && len(s) > width {
		s = s[:width]
	}
	return s
}

func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func bytesSI(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ShowProgress redraws p on w (a terminal) every interval until the
// returned stop is called, which erases the line. It draws nothing for
// imports that end within the first interval.
func ShowProgress(w io.Writer, p *Progress, width int, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		drawn := false
		for {
			select {
			case <-done:
				if drawn {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case <-t.C:
				fmt.Fprint(w, "\r\x1b[K"+p.Line(width-1))
				drawn = true
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

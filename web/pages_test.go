package web

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// assetVersion is the content hash in asset links; it changes with every
// edit of the CSS or the scripts, which is not what the goldens are about.
var assetVersion = regexp.MustCompile(`\?v=[0-9a-f]{8}`)

func golden(t *testing.T, name, got string) {
	t.Helper()
	got = assetVersion.ReplaceAllString(got, "?v=VERSION")
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./web -run TestPages -update)", err)
	}
	if !bytes.Equal(want, []byte(got)) {
		t.Errorf("%s differs from the golden file (go test ./web -run TestPages -update rewrites it):\n%s", name, firstDiff(string(want), got))
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + itoa(i+1) + ":\n- " + w + "\n+ " + g
		}
	}
	return ""
}

func itoa(i int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(i)) }

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestPages renders every page over the fixture and compares it with its
// golden file; names that are markup must come out as text.
func TestPages(t *testing.T) {
	s := newTestServer(t, fixtureStore(t))
	r := ids(t, s)
	waitIdle(t, s) // the summaries land, so the list is complete and stable
	pages := []struct {
		golden string
		path   string
		code   int
	}{
		{"rollouts.html", "/rollouts", 200},
		{"rollouts-filtered.html", "/rollouts?namespace=payments&since=168h", 200},
		{"rollouts-bad-filter.html", "/rollouts?since=forever", 400},
		{"timeline.html", r.checkout.Links.Timeline + "?from=1773489624000000000&to=1773489650000000000&sel=f:3", 200},
		{"alignment.html", r.checkout.Links.Alignment, 200},
		{"timeline-quiet.html", r.ledger.Links.Timeline, 200},
		{"alignment-quiet.html", r.ledger.Links.Alignment, 200},
		{"timeline-hostile.html", r.evil.Links.Timeline, 200},
		{"alignment-hostile.html", r.evil.Links.Alignment, 200},
		{"not-found.html", "/rollouts/shop/Deployment/checkout/1", 404},
		{"no-page.html", "/nowhere", 404},
		{"login.html", "/login?next=/rollouts", 200},
		{"check.html", "/check?from=1773480000000000000&to=1773500000000000000", 200},
		{"check-bad-filter.html", "/check?since=forever", 400},
	}
	for _, p := range pages {
		t.Run(p.golden, func(t *testing.T) {
			b := do(t, s, http.MethodGet, p.path)
			if b.code != p.code {
				t.Fatalf("GET %s: %d, want %d", p.path, b.code, p.code)
			}
			if ct := b.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			checkInert(t, b.body)
			golden(t, p.golden, b.body)
		})
	}
	t.Run("hostile names are text", func(t *testing.T) {
		for _, path := range []string{"/rollouts", r.evil.Links.Timeline, r.evil.Links.Alignment} {
			body := do(t, s, http.MethodGet, path).body
			if !strings.Contains(body, "&lt;img src=x onerror=alert(2)&gt;") {
				t.Errorf("%s: the workload name is not shown escaped", path)
			}
			if path != "/rollouts" && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("%s: the pod name is not shown escaped", path)
			}
		}
	})
}

var scriptTag = regexp.MustCompile(`(?i)<script[^>]*>`)

// checkInert fails on markup that could run: any script but our own
// external files, event-handler attributes, injected tags from the
// fixture's names.
func checkInert(t *testing.T, body string) {
	t.Helper()
	for _, tag := range scriptTag.FindAllString(body, -1) {
		if !regexp.MustCompile(`^<script src="/static/[a-z]+\.js\?v=[0-9a-f]{8}" defer>$`).MatchString(tag) {
			t.Errorf("unexpected script tag %q", tag)
		}
	}
	for _, bad := range []string{"<script>alert", "<img", "<svg onload", "<b>", "<i>x</i>"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains raw %q", bad)
		}
	}
	if m := handlerAttr.FindString(body); m != "" {
		t.Errorf("page has an event-handler attribute: %q", m)
	}
}

var handlerAttr = regexp.MustCompile(`<[^>]*\son[a-z]+=[^>]*>`)

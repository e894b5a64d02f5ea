package httpauth

import (
	"net/http"
	"testing"
)

func TestBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer s3cret":   "s3cret",
		"bearer  s3cret ": "s3cret",
		"Basic czNjcmV0":  "",
		"Bearer":          "",
		"":                "",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", h)
		if got := Bearer(r); got != want {
			t.Errorf("Authorization %q: token %q, want %q", h, got, want)
		}
	}
	if !TokenOK("s3cret", "s3cret") || TokenOK("s3cre", "s3cret") || TokenOK("", "") {
		t.Error("TokenOK: want equal tokens only, never an empty one")
	}
}

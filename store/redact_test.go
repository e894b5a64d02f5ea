package store

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// redactCases are DSNs in every form a password can take, each with the
// pieces of the password that must not survive redaction.
var redactCases = []struct {
	name   string
	dsn    string
	secret []string
}{
	{"url password", "postgres://u:Pw0rdSecret@db.example:5432/events", []string{"Pw0rdSecret"}},
	{"postgresql scheme", "postgresql://u:Pw0rdSecret@db.example/events?sslmode=disable", []string{"Pw0rdSecret"}},
	{"query password", "postgres://u@db.example/events?sslmode=disable&password=QuerySecret", []string{"QuerySecret"}},
	{"query password first", "postgres://db.example/events?password=QuerySecret&user=u", []string{"QuerySecret"}},
	{"query password encoded key", "postgres://db.example/events?pass%77ord=QuerySecret", []string{"QuerySecret"}},
	{"query sslpassword", "postgres://u@db.example/events?sslpassword=KeySecret", []string{"KeySecret"}},
	{"keyword password", "host=db.example user=u password=KwSecret dbname=events", []string{"KwSecret"}},
	{"keyword password last", "host=db.example dbname=events password=KwSecret", []string{"KwSecret"}},
	{"keyword password spaced", "host=db.example password = KwSecret dbname=events", []string{"KwSecret"}},
	{"keyword password quoted", "host=db.example password='Kw Secret\\' Quoted' dbname=events", []string{"Kw", "Secret", "Quoted"}},
	{"keyword password upper case", "host=db.example PASSWORD=KwSecret", []string{"KwSecret"}},
	{"at in password", "postgres://u:left@right-secret@db.example/events", []string{"left", "right-secret"}},
	{"at and colon in password", "postgres://u:le:ft@ri@ght@db.example/events", []string{"le:ft", "ri@ght", "ght@db"}},
	{"url password with a space", "postgres://u:S3CRET PWTAIL@db.example/events", []string{"S3CRET", "PWTAIL"}},
	{"url password with spaces, no path", "postgres://u:S3CRET PW TAIL@db.example", []string{"S3CRET", "PW", "TAIL"}},
	{"keyword password with a space", "host=db.example password=S3CRET PWTAIL dbname=events", []string{"S3CRET", "PWTAIL"}},
	{"keyword password with a space last", "host=db.example password=S3CRET PWTAIL", []string{"S3CRET", "PWTAIL"}},
	{"url password and query password", "postgres://u:Pw0rdSecret@db.example/events?password=QuerySecret", []string{"Pw0rdSecret", "QuerySecret"}},
}

func TestRedact(t *testing.T) {
	for _, c := range redactCases {
		t.Run(c.name, func(t *testing.T) {
			for _, text := range []string{
				c.dsn,
				"store " + c.dsn + ": connecting: refused",
				fmt.Sprintf("store %q: unknown", c.dsn),
				"cannot parse `" + c.dsn + "`: failed",
			} {
				got := Redact(text)
				for _, s := range c.secret {
					if strings.Contains(got, s) {
						t.Errorf("Redact(%q) = %q: still holds %q", text, got, s)
					}
				}
				if !strings.Contains(got, "db.example") {
					t.Errorf("Redact(%q) = %q: the host went too", text, got)
				}
			}
		})
	}
	for _, keep := range []string{
		"postgres://u@db.example/events?sslmode=disable",
		"host=db.example user=u dbname=events",
		"/var/lib/drainscope/events.db",
		"reading rollout default/Deployment/web/1700000000000000000: timeout",
		"store postgres://db.example:5432/events: connecting: refused",
		"store host=db.example password=xxxxx dbname=events: connecting: refused",
	} {
		if got := Redact(keep); got != keep {
			t.Errorf("Redact(%q) = %q: changed text without a secret", keep, got)
		}
	}
}

// TestRedactPgxErrors runs each DSN through pgx, which parses it and
// echoes it in its errors, and through OpenPostgres on a closed port: no
// message, nor Describe, holds the password.
func TestRedactPgxErrors(t *testing.T) {
	bad := []struct{ dsn, secret string }{
		{"postgres://u:left@right-secret@127.0.0.1:bad/events", "right-secret"},
		{"postgres://u:Pw0rdSecret@127.0.0.1:99999/events", "Pw0rdSecret"},
		{"postgres://u@127.0.0.1/events?password=QuerySecret&connect_timeout=x", "QuerySecret"},
		{"host=127.0.0.1 password=KwSecret port=bad", "KwSecret"},
		{"host=127.0.0.1 password='Kw Secret' connect_timeout=x", "Secret"},
		{"postgres://u:S3CRET PWTAIL@127.0.0.1/events", "S3CRET"},
		{"postgres://u:S3CRET PWTAIL@127.0.0.1/events", "PWTAIL"},
		{"host=127.0.0.1 password=S3CRET PWTAIL", "PWTAIL"},
		{"host=127.0.0.1 password=S3CRET PWTAIL dbname=x", "PWTAIL"},
	}
	for _, c := range bad {
		_, err := pgxpool.ParseConfig(c.dsn)
		if err == nil {
			t.Fatalf("pgx parsed %q; the test wants a DSN it refuses", c.dsn)
		}
		if got := RedactDSN(err.Error(), c.dsn); strings.Contains(got, c.secret) {
			t.Errorf("pgx's error for %q, redacted: %q", c.dsn, got)
		}
		_, err = Open(context.Background(), c.dsn)
		if err == nil || strings.Contains(err.Error(), c.secret) {
			t.Errorf("Open(%q): %v", c.dsn, err)
		}
	}
	// A DSN pgx parses, on a port nothing listens on: the connect error.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range redactCases {
		dsn := strings.ReplaceAll(c.dsn, "db.example:5432", "127.0.0.1:1")
		dsn = strings.ReplaceAll(dsn, "db.example", "127.0.0.1:1")
		if !strings.Contains(dsn, "://") {
			dsn += " port=1"
		}
		dsn = strings.ReplaceAll(dsn, "host=127.0.0.1:1", "host=127.0.0.1")
		if cfg, err := pgxpool.ParseConfig(dsn); err == nil && net.ParseIP(cfg.ConnConfig.Host) == nil && !strings.Contains(cfg.ConnConfig.Host, "@") {
			continue // a name to resolve: the test reaches loopback only
		}
		_, err := Open(ctx, dsn)
		if err == nil {
			t.Fatalf("Open(%q) succeeded on a closed port", dsn)
		}
		for _, s := range c.secret {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: Open's error holds %q: %v", c.name, s, err)
			}
		}
	}
	if cfg, err := pgxpool.ParseConfig("postgres://u:Pw0rdSecret@127.0.0.1:5433/events?password=QuerySecret&sslmode=disable"); err != nil {
		t.Fatal(err)
	} else if got, want := describePostgres(cfg.ConnConfig.Config), "postgres://u@127.0.0.1:5433/events"; got != want {
		t.Errorf("describePostgres = %q, want %q", got, want)
	}
}

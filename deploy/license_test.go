package deploy_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The repository carries its license (Apache-2.0, what this ecosystem
// uses), and the image and the krew plugin say so.
func TestLicense(t *testing.T) {
	lic, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatalf("no LICENSE at the top of the repository: %v", err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION"} {
		if !bytes.Contains(lic, []byte(want)) {
			t.Errorf("LICENSE lacks %q: not the Apache License 2.0", want)
		}
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`org.opencontainers.image.licenses="Apache-2.0"`, "COPY --from=build /src/LICENSE /LICENSE"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
	krew, err := os.ReadFile("../scripts/krew-release.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(krew), `cp "$root/LICENSE"`) {
		t.Error("the krew archives do not carry the LICENSE")
	}
}

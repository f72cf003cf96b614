package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the Chromium binary browser tests drive: $REZUSCLOUD_CHROMIUM
// when set, else Debian's chromium on the PATH (`make chromium` installs it).
// When it is missing the test is skipped, or fails when $CI is set.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REZUSCLOUD_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			missing(t, "chromium: $REZUSCLOUD_CHROMIUM: "+err.Error())
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "chromium not found; run make chromium (apt-get install chromium) or set REZUSCLOUD_CHROMIUM")
	return ""
}

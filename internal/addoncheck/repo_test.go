package addoncheck

import "testing"

// TestRepository checks this repository's add-on package.
func TestRepository(t *testing.T) {
	errs, warnings := CheckDir("../..")
	for _, err := range errs {
		t.Error(err)
	}
	for _, w := range warnings {
		t.Log("warning:", w)
	}
}

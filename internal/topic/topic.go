// Package topic owns the rules for the two MQTT topic settings, the base
// topic and Home Assistant's discovery prefix, so that config loading, the
// bridge's options and the add-on's config.yaml schema agree.
package topic

import (
	"fmt"
	"regexp"
	"strings"
)

// The patterns are the ones config.yaml's schema uses (a test keeps them in
// step): the base topic is one topic level of letters, digits, '_' and '-';
// the discovery prefix is one topic level without '/', '+' or '#'.
const (
	BasePattern   = `^[A-Za-z0-9_-]+$`
	PrefixPattern = `^[^/+#]+$`
)

var (
	baseRE   = regexp.MustCompile(BasePattern)
	prefixRE = regexp.MustCompile(PrefixPattern)
)

// CheckBase reports whether s is a valid base topic.
func CheckBase(s string) error {
	if !baseRE.MatchString(s) {
		return fmt.Errorf("%q must be a non-empty topic level of letters, digits, '_' and '-'", s)
	}
	return nil
}

// CheckPrefix reports whether s is a valid discovery prefix (MQTT also
// forbids U+0000 in any topic).
func CheckPrefix(s string) error {
	if !prefixRE.MatchString(s) || strings.ContainsRune(s, 0) {
		return fmt.Errorf("%q must be a non-empty topic level without / + #", s)
	}
	return nil
}

package web

import (
	"net/http"
	"net/url"
	"strings"
)

// newPost is a form post from a page of origin.
func newPost(u string, v url.Values, origin string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(v.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return req, nil
}

package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fileIssuer is an Issuer as an issuers file writes it: durations as text ("30s"), a key set
// by file, a secret by the environment variable holding it (never in the file).
type fileIssuer struct {
	Issuer
	KeySetFile         string `json:"key_set_file,omitempty"`
	SecretEnv          string `json:"secret_env,omitempty"`
	Leeway             string `json:"leeway,omitempty"`
	RefreshInterval    string `json:"refresh_interval,omitempty"`
	UnknownKIDInterval string `json:"unknown_kid_interval,omitempty"`
	FetchTimeout       string `json:"fetch_timeout,omitempty"`
}

// ReadIssuersFile reads the issuers file at path (README: "Identity providers"):
//
//	{"issuers": [{"issuer": "https://example.eu.auth0.com/", "jwks_url": "...", "algorithms": ["RS256"], ...}]}
//
// A key_set_file is read relative to the file's folder; a secret_env names the environment
// variable (looked up with getenv) that holds a shared secret.
func ReadIssuersFile(path string, getenv func(string) string) ([]Issuer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: the issuers file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f struct {
		Issuers []fileIssuer `json:"issuers"`
	}
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth: the issuers file %s: %w", path, err)
	}
	if len(f.Issuers) == 0 {
		return nil, fmt.Errorf("auth: the issuers file %s names no issuer", path)
	}
	out := make([]Issuer, 0, len(f.Issuers))
	for i, fi := range f.Issuers {
		is := fi.Issuer
		where := fmt.Sprintf("auth: the issuers file %s, issuer %d", path, i)
		for _, d := range []struct {
			text string
			to   *time.Duration
			name string
		}{{fi.Leeway, &is.Leeway, "leeway"}, {fi.RefreshInterval, &is.RefreshInterval, "refresh_interval"},
			{fi.UnknownKIDInterval, &is.UnknownKIDInterval, "unknown_kid_interval"}, {fi.FetchTimeout, &is.FetchTimeout, "fetch_timeout"}} {
			if d.text == "" {
				continue
			}
			v, err := time.ParseDuration(d.text)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%s: %s %q is not a duration such as 30s", where, d.name, d.text)
			}
			*d.to = v
		}
		if fi.KeySetFile != "" {
			p := fi.KeySetFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(path), p)
			}
			ks, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("%s: key_set_file: %w", where, err)
			}
			is.KeySet = ks
		}
		if fi.SecretEnv != "" {
			v := getenv(fi.SecretEnv)
			if v == "" {
				return nil, fmt.Errorf("%s: secret_env: $%s is empty", where, fi.SecretEnv)
			}
			is.Secret = []byte(v)
		}
		out = append(out, is)
	}
	return out, nil
}

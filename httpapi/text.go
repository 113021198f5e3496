package httpapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/rindle-sh/rindle-go/auth"
)

// jsonText is a JSON string field that remembers why its raw form was not text: encoding/json
// silently turns invalid UTF-8 and an unpaired surrogate escape ("\ud83d" alone) into U+FFFD,
// which would push text the client never sent. The handler refuses it with 400 instead.
type jsonText struct {
	s   string
	bad string // why the raw JSON string is not valid text; empty when it is
}

// Schema documents it as the plain string it is.
func (jsonText) Schema(huma.Registry) *huma.Schema { return &huma.Schema{Type: "string"} }

// UnmarshalJSON keeps the decoded string and checks the raw one.
func (t *jsonText) UnmarshalJSON(raw []byte) error {
	t.bad = rawTextProblem(raw)
	return json.Unmarshal(raw, &t.s)
}

// rawTextProblem checks a raw JSON string token: valid UTF-8, and every \u escape of a surrogate
// paired with its partner. It returns why not, or "".
func rawTextProblem(raw []byte) string {
	if !utf8.Valid(raw) {
		return "the text is not valid UTF-8"
	}
	var high rune = -1 // a high surrogate escape waiting for its low half
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			if high >= 0 {
				return "the text has an unpaired surrogate escape"
			}
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' || i+4 >= len(raw) {
			if high >= 0 {
				return "the text has an unpaired surrogate escape"
			}
			continue // \" \\ \n and the like; json.Unmarshal checks the rest
		}
		v, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 32)
		if err != nil {
			return "" // malformed: json.Unmarshal says so
		}
		i += 4
		r := rune(v)
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high
			if high >= 0 {
				return "the text has an unpaired surrogate escape"
			}
			high = r
		case utf16.IsSurrogate(r): // low
			if high < 0 {
				return "the text has an unpaired surrogate escape"
			}
			high = -1
		default:
			if high >= 0 {
				return "the text has an unpaired surrogate escape"
			}
		}
	}
	if high >= 0 {
		return "the text has an unpaired surrogate escape"
	}
	return ""
}

// unstorable refuses a name or message PostgreSQL cannot store (invalid UTF-8, or U+0000) with
// 400 before it reaches the database, where it would fail like an outage (503, retried
// forever by clients that retry 503) instead of like the input error it is. It returns nil for
// storable text.
func unstorable(field, v string) error {
	switch {
	case !utf8.ValidString(v):
		return huma.Error400BadRequest(field + " is not valid UTF-8")
	case strings.IndexByte(v, 0) >= 0:
		return huma.Error400BadRequest(field + " holds U+0000 (NUL), which PostgreSQL cannot store")
	case strings.Contains(v, auth.TenantSeparator):
		return huma.Error400BadRequest(field + " holds U+001F, which separates tenants in the stores' keys")
	}
	return nil
}

package httpapi

import "testing"

func TestRawTextProblem(t *testing.T) {
	t.Parallel()
	for raw, bad := range map[string]bool{
		`"plain"`:                false,
		`"x\ud83d\ude00y"`:       false, // a pair: 😀
		`"x\ud83dy"`:             true,  // a high half alone
		`"x\ude00y"`:             true,  // a low half alone
		`"\ud83d"`:               true,
		`"\ud83d\u0041"`:         true,
		`"\ud83d\ud83d\ude00"`:   true,
		`"a\\ud83d"`:             false, // an escaped backslash, then text
		`"\u00e9\n\"q\""`:        false,
		"\"\xff\"":               true,
		`"\ud83d\ude00\ud83d\n"`: true,
	} {
		if got := rawTextProblem([]byte(raw)) != ""; got != bad {
			t.Errorf("%s: problem %v, want %v", raw, got, bad)
		}
	}
}

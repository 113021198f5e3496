package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ratios are taken within each repetition, then spread: run 1's 10 ÷ 20 and run 2's 9 ÷ 10
// are 0.5 and 0.9, which dividing the medians (or mins) of the two columns would not give.
func TestPrintRatiosPairsEachRunWithItsFloor(t *testing.T) {
	figures := map[string][]float64{
		"cpu":                 {10, 9, 12},
		"[floor] cpu":         {20, 10, 16},
		"[direct floor] cpu":  {10, 9, 12},
		"only ours":           {1, 2, 3},
		"[floor] only theirs": {1, 2, 3},
	}
	var out bytes.Buffer
	printRatios(&out, figures, []string{"cpu", "only ours", "[floor] cpu", "[direct floor] cpu", "[floor] only theirs"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	require.Regexp(t, `^cpu ÷ \[floor\] +0\.500 +0\.750 +0\.900$`, lines[1])
	require.Regexp(t, `^cpu ÷ \[direct floor\] +1\.000 +1\.000 +1\.000$`, lines[2])
}

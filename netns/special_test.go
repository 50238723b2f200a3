package netns

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestSpecialRangesIn(t *testing.T) {
	all := SpecialRangesIn(netip.MustParsePrefix("0.0.0.0/0"))
	if len(all) != len(specialRanges) {
		t.Fatalf("0.0.0.0/0 excepts %d of %d special ranges: %v", len(all), len(specialRanges), all)
	}
	for p, want := range map[string][]string{
		"10.0.0.0/8":       nil, // the range itself: named explicitly
		"10.1.2.3/32":      nil, // inside one
		"93.184.215.14/32": nil, // none inside
		"192.0.0.0/16":     {"192.0.0.0/24", "192.0.2.0/24"},
		"160.0.0.0/4":      {"169.254.0.0/16", "172.16.0.0/12"},
	} {
		got := SpecialRangesIn(netip.MustParsePrefix(p))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
}

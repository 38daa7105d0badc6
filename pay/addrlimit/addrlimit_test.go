package addrlimit

import "testing"

func TestCountsBoundEachAddressAndForgetTheEmpty(t *testing.T) {
	c := New(2, 1)
	for i := range 2 {
		if !c.Take("a", false) {
			t.Fatalf("take %d of the bound's 2 was refused", i+1)
		}
	}
	if c.Take("a", false) {
		t.Fatal("one past the bound was taken")
	}
	if !c.Take("a", true) || c.Take("a", true) {
		t.Fatal("the reserve is not exactly one more")
	}
	if !c.Take("b", false) {
		t.Fatal("another address was refused")
	}
	for range 3 {
		c.Release("a")
	}
	c.Release("b")
	if n := c.Addresses(); n != 0 {
		t.Fatalf("%d addresses kept with nothing open", n)
	}
}

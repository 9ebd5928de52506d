package count

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestTop(t *testing.T) {
	c := New(Options{})
	if err := c.Read(strings.NewReader("the cat, the dog; THE end. Dog!")); err != nil {
		t.Fatal(err)
	}
	want := []Word{{"the", 3}, {"dog", 2}, {"cat", 1}}
	if got := c.Top(3); !reflect.DeepEqual(got, want) {
		t.Errorf("Top(3) = %v; want %v", got, want)
	}
	if c.Total() != 6 {
		t.Errorf("Total() = %d; want 6", c.Total())
	}
}

func TestMinLength(t *testing.T) {
	c := New(Options{MinLength: 4})
	if err := c.Read(strings.NewReader("a an and sand sands")); err != nil {
		t.Fatal(err)
	}
	if got := len(c.Top(10)); got != 2 {
		t.Errorf("kept %d words; want 2", got)
	}
}

func TestSampleText(t *testing.T) {
	f, err := os.Open("../testdata/harbour.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := New(Options{MinLength: 3})
	if err := c.Read(f); err != nil {
		t.Fatal(err)
	}
	if top := c.Top(1); len(top) != 1 || top[0].Word != "the" {
		t.Errorf("most frequent word = %v; want the", top)
	}
}

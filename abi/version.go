package abi

import (
	"fmt"
	"strconv"
)

// Version is a header's DAC_VERSION_MAJOR, DAC_VERSION_MINOR and
// DAC_VERSION_PATCH: the project states its version there and nowhere
// else, so the tests read their expected version from it and the next
// release changes one line.
type Version struct {
	Major, Minor, Patch int
}

// String is DAC_VERSION_STRING: "MAJOR.MINOR.PATCH".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// Number is DAC_VERSION_NUMBER, by the header's formula.
func (v Version) Number() int {
	return v.Major*1000000 + v.Minor*1000 + v.Patch
}

// Soname is the library's soname, which changes with the major version only.
func (v Version) Soname() string {
	return "libdistautograd.so." + strconv.Itoa(v.Major)
}

// HeaderVersion reads the version of the header at path (include/distautograd.h).
func HeaderVersion(path string) (Version, error) {
	u, err := Parse(path, Options{Prefix: "dac_"})
	if err != nil {
		return Version{}, err
	}
	found := map[string]int64{}
	for _, c := range u.Consts {
		found[c.Name] = c.Value
	}
	var v Version
	for name, field := range map[string]*int{"DAC_VERSION_MAJOR": &v.Major, "DAC_VERSION_MINOR": &v.Minor, "DAC_VERSION_PATCH": &v.Patch} {
		n, ok := found[name]
		if !ok || n < 0 || n > 999 {
			return Version{}, fmt.Errorf("abi: %s: %s is not an integer literal from 0 to 999 (DAC_VERSION_NUMBER gives each part three digits)", path, name)
		}
		*field = int(n)
	}
	return v, nil
}

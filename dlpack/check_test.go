package dlpack

import "testing"

// The fast checks must agree with the map-based ones in types.go for every
// value, or import and export would accept what Validate rejects.
func TestFastChecksAgree(t *testing.T) {
	for c := 0; c < 256; c++ {
		for bits := 0; bits < 256; bits++ {
			for _, lanes := range []uint16{0, 1, 2, 4} {
				dt := DataType{TypeCode(c), uint8(bits), lanes}
				if got, want := dtypeOK(dt), dt.Validate() == nil; got != want {
					t.Fatalf("dtypeOK(%+v) = %v, Validate says %v", dt, got, want)
				}
			}
		}
	}
	for d := -2; d < 40; d++ {
		if got, want := deviceTypeOK(DeviceType(d)), DeviceType(d).Valid(); got != want {
			t.Errorf("deviceTypeOK(%d) = %v, Valid says %v", d, got, want)
		}
	}
}

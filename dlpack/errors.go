package dlpack

// FieldError reports a DLPack struct field that failed validation, by its C
// name as the spec writes it ("dl_tensor.ndim", "dl_tensor.shape[2]",
// "version.major", "flags"), so the producer's author knows what to fix.
type FieldError struct {
	Field string // C field path
	Msg   string // what is wrong, with the value and the limit
}

func (e *FieldError) Error() string { return "dlpack: " + e.Field + ": " + e.Msg }

func fieldErr(field, msg string) error { return &FieldError{Field: field, Msg: msg} }

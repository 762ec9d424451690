package pyfunc

// SchemaNames parses schema as Register does and returns its dotted name
// and its parameters' names, in order, or the error Register would report
// for its syntax. dlbridge build reads it to name a parameter's Go type in
// the messages of its schema check.
func SchemaNames(schema string) (name string, params []string, err error) {
	name, sp, err := parseSchema(schema)
	if err != nil {
		return "", nil, err
	}
	params = make([]string, len(sp))
	for i, p := range sp {
		params[i] = p.name
	}
	return name, params, nil
}

package schemas

// Located is a YAML (or JSON) file that passed its schema and remembers
// where each of its values sits, so that checks made after the schema's
// (by the package that gives the file its meaning) report file:line too.
type Located struct{ d *document }

// At returns a problem about the value at field (a path such as
// allow[1].timezone), at its line and column.
func (l *Located) At(field, format string, args ...any) Problem {
	return l.d.at(field, false, format, args...)
}

// DecodeLocated parses data, the YAML or JSON file read from file,
// checks it against the named embedded schema and decodes it into out.
// The error is Problems, each with the file, line and field.
func DecodeLocated(schema, file string, data []byte, out any) (*Located, error) {
	d, ps := parseYAML(file, data)
	if len(ps) > 0 {
		return nil, ps.Err()
	}
	if ps := d.validate(schema, out); len(ps) > 0 {
		return nil, ps.Err()
	}
	return &Located{d: d}, nil
}

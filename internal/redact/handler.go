package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler returns a slog.Handler that redacts the message and every
// attribute of each record, then passes it to h: string values, errors
// and anything else printed with %+v. A nil or empty Redactor returns h.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	if r.empty() {
		return h
	}
	return &handler{r: r, h: h}
}

type handler struct {
	r *Redactor
	h slog.Handler
}

var _ slog.Handler = (*handler)(nil)

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.r.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.r.attr(a)
	}
	return &handler{r: h.r, h: h.h.WithAttrs(red)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{r: h.r, h: h.h.WithGroup(name)}
}

// attr returns a with its value redacted.
func (r *Redactor) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = r.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		var s string
		if err, ok := v.Any().(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprintf("%+v", v.Any())
		}
		if red := r.String(s); red != s {
			return slog.String(a.Key, red)
		}
		return slog.Attr{Key: a.Key, Value: v}
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}

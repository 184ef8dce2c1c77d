package jinja

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// scope is one level of variables: the template's top level, a loop
// iteration or a macro call. Assignments go to the innermost scope, so a
// {% set %} inside a loop does not leak out, as in Jinja.
type scope struct {
	vars   map[string]Value
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]Value{}, parent: parent} }

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// renderer is the state of one Render call.
type renderer struct {
	ctx      context.Context
	limits   Limits
	now      func() time.Time
	out      *strings.Builder
	written  int // bytes written to all buffers
	built    int // bytes of values built (see build)
	pending  int // work since the clock was last read (see work)
	steps    int
	depth    int // macro call depth
	loopDeep int // loops being executed
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

func (r *renderer) errorf(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Work accounting: a step counts stepWork bytes, and the clock is read
// once clockEvery bytes of work have accumulated (every 64 steps, or
// before any operation on a value of 16 KiB or more). A list or dict item
// counts itemBytes.
const (
	stepWork   = 256
	clockEvery = 16 << 10
	itemBytes  = 16
)

// step counts work and enforces the step budget and the deadline.
func (r *renderer) step(line int) error {
	r.steps++
	if r.steps > r.limits.MaxSteps {
		return r.errorf(line, "template exceeded %d steps", r.limits.MaxSteps)
	}
	if err := r.work(stepWork); err != nil {
		return r.errorf(line, "%v", err)
	}
	return nil
}

// work counts n bytes of work about to be done and checks the deadline
// once enough has accumulated.
func (r *renderer) work(n int) error {
	r.pending += n
	if r.pending < clockEvery {
		return nil
	}
	r.pending = 0
	if err := r.ctx.Err(); err != nil {
		return fmt.Errorf("rendering stopped: %w", err)
	}
	return nil
}

// build charges a value of n bytes about to be built against the budget
// of all values built, and counts the work of building it.
func (r *renderer) build(n int) error {
	r.built += n
	if r.built > r.limits.MaxBuilt {
		return fmt.Errorf("template built more than %d bytes of values", r.limits.MaxBuilt)
	}
	return r.work(n)
}

// size is the bytes a value holds at its top level: a string's length, or
// itemBytes per item of a list or dict.
func size(v Value) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case *List:
		return itemBytes * len(v.Items)
	case *Dict:
		return 2 * itemBytes * v.Len()
	}
	return itemBytes
}

// checkBuilt enforces the limits on one value a filter, function or
// method returned: MaxOutput bytes for a string, MaxItems items for a list
// or dict, and charges it against the budget of all values built.
func (r *renderer) checkBuilt(v Value) error {
	switch v := v.(type) {
	case string:
		if len(v) > r.limits.MaxOutput {
			return fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
		}
	case *List:
		if len(v.Items) > r.limits.MaxItems {
			return fmt.Errorf("list longer than %d items", r.limits.MaxItems)
		}
	case *Dict:
		if v.Len() > r.limits.MaxItems {
			return fmt.Errorf("dict of more than %d items", r.limits.MaxItems)
		}
	}
	return r.build(size(v))
}

func (r *renderer) write(s string, line int) error {
	r.written += len(s)
	if r.written > r.limits.MaxOutput {
		return r.errorf(line, "template output exceeded %d bytes", r.limits.MaxOutput)
	}
	r.out.WriteString(s)
	return nil
}

// capture renders nodes into a string (macro bodies, block sets).
func (r *renderer) capture(nodes []node, s *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.execBody(nodes, s)
	r.out = saved
	return b.String(), err
}

func (r *renderer) execBody(nodes []node, s *scope) error {
	for _, n := range nodes {
		if err := r.exec(n, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(n node, s *scope) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(n.text, 0)
	case *outputNode:
		if err := r.step(n.line); err != nil {
			return err
		}
		v, err := r.eval(n.e, s)
		if err != nil {
			return err
		}
		return r.write(toStr(v), n.line)
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, s)
			if err != nil {
				return err
			}
			if truth(v) {
				return r.execBody(n.bodies[i], s)
			}
		}
		return r.execBody(n.els, s)
	case *forNode:
		return r.execFor(n, s)
	case *setNode:
		return r.execSet(n, s)
	case *macroNode:
		m := *n.m
		m.scope = s
		s.vars[m.name] = &m
		return nil
	case *callBlockNode:
		return r.execCallBlock(n, s)
	case *filterBlockNode:
		text, err := r.capture(n.body, s)
		if err != nil {
			return err
		}
		var v Value = text
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, s); err != nil {
				return err
			}
		}
		return r.write(toStr(v), 0)
	case *breakNode:
		if r.loopDeep == 0 {
			return r.errorf(n.line, "'break' outside a loop")
		}
		return errBreak
	case *continueNode:
		if r.loopDeep == 0 {
			return r.errorf(n.line, "'continue' outside a loop")
		}
		return errContinue
	}
	return fmt.Errorf("internal error: unknown node %T", n)
}

// loopState is the "loop" variable of a for loop.
type loopState struct {
	items []Value
	i     int
}

func (l *loopState) attr(name string) Value {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1)
	case "index0":
		return int64(l.i)
	case "revindex":
		return int64(n - l.i)
	case "revindex0":
		return int64(n - l.i - 1)
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.i > 0 {
			return l.items[l.i-1]
		}
	case "nextitem":
		if l.i+1 < n {
			return l.items[l.i+1]
		}
	case "cycle":
		return &callable{name: "cycle", fn: func(_ *renderer, args []Value, _ []kwValue) (Value, error) {
			if len(args) == 0 {
				return nil, errors.New("loop.cycle needs at least one argument")
			}
			return args[l.i%len(args)], nil
		}}
	}
	return Undefined{Name: "loop." + name}
}

// maxIterRunes bounds the characters of a string a loop or filter walks
// over: each becomes an item.
const maxIterRunes = 1 << 20

// iterate returns the items a for loop or filter walks over.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return v.keys, nil
	case string:
		if n := utf8.RuneCountInString(v); n > maxIterRunes {
			return nil, fmt.Errorf("string of %d characters is too long to iterate over (limit %d)", n, maxIterRunes)
		}
		out := make([]Value, 0, len(v))
		for _, c := range v {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) execFor(n *forNode, s *scope) error {
	iv, err := r.eval(n.iter, s)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return r.errorf(n.line, "%v", err)
	}
	if n.cond != nil {
		var kept []Value
		for _, it := range items {
			is := newScope(s)
			if err := r.bindTargets(is, n.targets, it, n.line); err != nil {
				return err
			}
			c, err := r.eval(n.cond, is)
			if err != nil {
				return err
			}
			if truth(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(n.els, s)
	}
	r.loopDeep++
	defer func() { r.loopDeep-- }()
	loop := &loopState{items: items}
	for i, it := range items {
		if err := r.step(n.line); err != nil {
			return err
		}
		loop.i = i
		is := newScope(s)
		is.vars["loop"] = loop
		if err := r.bindTargets(is, n.targets, it, n.line); err != nil {
			return err
		}
		err := r.execBody(n.body, is)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (r *renderer) bindTargets(s *scope, targets []string, v Value, line int) error {
	if len(targets) == 1 {
		s.vars[targets[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return r.errorf(line, "cannot unpack: %v", err)
	}
	if _, isUndef := v.(Undefined); isUndef || len(items) != len(targets) {
		return r.errorf(line, "cannot unpack %d values into %d names", len(items), len(targets))
	}
	for i, t := range targets {
		s.vars[t] = items[i]
	}
	return nil
}

func (r *renderer) execSet(n *setNode, s *scope) error {
	var v Value
	var err error
	if n.value != nil {
		v, err = r.eval(n.value, s)
	} else {
		var text string
		text, err = r.capture(n.body, s)
		v = text
		for _, f := range n.filters {
			if err != nil {
				break
			}
			v, err = r.applyFilter(f, v, s)
		}
	}
	if err != nil {
		return err
	}
	if n.ns != "" {
		target, _ := s.lookup(n.ns)
		ns, ok := target.(*Namespace)
		if !ok {
			return r.errorf(n.line, "cannot assign attribute on non-namespace object '%s'", n.ns)
		}
		return ns.attrs.Set(n.attr, v)
	}
	return r.bindTargets(s, n.targets, v, n.line)
}

func (r *renderer) execCallBlock(n *callBlockNode, s *scope) error {
	caller := &macro{name: "caller", params: n.params, defaults: make([]expr, len(n.params)), body: n.body, scope: s, line: n.line}
	v, err := r.evalCall(n.call, s, caller)
	if err != nil {
		return err
	}
	return r.write(toStr(v), n.line)
}

// callMacro renders a macro with its arguments bound.
func (r *renderer) callMacro(m *macro, args []Value, kwargs []kwValue, caller *macro, line int) (Value, error) {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > r.limits.MaxCallDepth {
		return nil, r.errorf(line, "macro calls nested more than %d deep", r.limits.MaxCallDepth)
	}
	ms := newScope(m.scope)
	for i, p := range m.params {
		switch {
		case i < len(args):
			ms.vars[p] = args[i]
		default:
			ms.vars[p] = Undefined{Name: p}
			if m.defaults[i] != nil {
				d, err := r.eval(m.defaults[i], ms)
				if err != nil {
					return nil, err
				}
				ms.vars[p] = d
			}
		}
	}
	extra := &List{Tuple: true}
	if len(args) > len(m.params) {
		extra.Items = args[len(m.params):]
	}
	ms.vars["varargs"] = extra
	kw := NewDict()
	for _, k := range kwargs {
		found := false
		for _, p := range m.params {
			if p == k.name {
				ms.vars[p] = k.v
				found = true
			}
		}
		if !found {
			_ = kw.Set(k.name, k.v)
		}
	}
	ms.vars["kwargs"] = kw
	if caller != nil {
		ms.vars["caller"] = caller
	}
	saved := r.loopDeep
	r.loopDeep = 0
	text, err := r.capture(m.body, ms)
	r.loopDeep = saved
	if err != nil {
		return nil, err
	}
	return text, nil
}

func (r *renderer) eval(e expr, s *scope) (Value, error) {
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		if v, ok := s.lookup(e.name); ok {
			return v, nil
		}
		if f, ok := globals[e.name]; ok {
			return f, nil
		}
		return Undefined{Name: e.name}, nil
	case *listExpr:
		if err := r.build(itemBytes * len(e.items)); err != nil {
			return nil, r.errorf(0, "%v", err)
		}
		l := &List{Items: make([]Value, len(e.items))}
		for i, it := range e.items {
			v, err := r.eval(it, s)
			if err != nil {
				return nil, err
			}
			l.Items[i] = v
		}
		return l, nil
	case *tupleExpr:
		if err := r.build(itemBytes * len(e.items)); err != nil {
			return nil, r.errorf(0, "%v", err)
		}
		l := &List{Items: make([]Value, len(e.items)), Tuple: true}
		for i, it := range e.items {
			v, err := r.eval(it, s)
			if err != nil {
				return nil, err
			}
			l.Items[i] = v
		}
		return l, nil
	case *dictExpr:
		if err := r.build(2 * itemBytes * len(e.keys)); err != nil {
			return nil, r.errorf(0, "%v", err)
		}
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], s)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i], s)
			if err != nil {
				return nil, err
			}
			if err := d.Set(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return r.getAttr(obj, e.name, e.line)
	case *itemExpr:
		obj, err := r.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(e.key, s)
		if err != nil {
			return nil, err
		}
		return r.getItem(obj, key, e.line)
	case *sliceExpr:
		return r.evalSlice(e, s)
	case *callExpr:
		return r.evalCall(e, s, nil)
	case *filterExpr:
		obj, err := r.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, obj, s)
	case *testExpr:
		return r.evalTest(e, s)
	case *unaryExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truth(x), nil
		case "-":
			switch x := x.(type) {
			case int64:
				return -x, nil
			case float64:
				return -x, nil
			case bool:
				if x {
					return int64(-1), nil
				}
				return int64(0), nil
			}
		case "+":
			switch x.(type) {
			case int64, float64:
				return x, nil
			}
		}
		return nil, r.errorf(e.line, "bad operand type for unary %s: '%s'", e.op, typeName(x))
	case *andExpr:
		l, err := r.eval(e.l, s)
		if err != nil || !truth(l) {
			return l, err
		}
		return r.eval(e.r, s)
	case *orExpr:
		l, err := r.eval(e.l, s)
		if err != nil || truth(l) {
			return l, err
		}
		return r.eval(e.r, s)
	case *condExpr:
		c, err := r.eval(e.cond, s)
		if err != nil {
			return nil, err
		}
		if truth(c) {
			return r.eval(e.then, s)
		}
		if e.els == nil {
			return Undefined{}, nil
		}
		return r.eval(e.els, s)
	case *concatExpr:
		var b strings.Builder
		for _, p := range e.parts {
			v, err := r.eval(p, s)
			if err != nil {
				return nil, err
			}
			str := toStr(v)
			if b.Len()+len(str) > r.limits.MaxOutput {
				return nil, r.errorf(e.line, "string longer than %d bytes", r.limits.MaxOutput)
			}
			if err := r.build(len(str)); err != nil {
				return nil, r.errorf(e.line, "%v", err)
			}
			b.WriteString(str)
		}
		return b.String(), nil
	case *cmpExpr:
		return r.evalCompare(e, s)
	case *binExpr:
		l, err := r.eval(e.l, s)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(e.r, s)
		if err != nil {
			return nil, err
		}
		v, err := r.binop(e.op, l, rv)
		if err != nil {
			return nil, r.errorf(e.line, "%v", err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", e)
}

func (r *renderer) evalCompare(e *cmpExpr, s *scope) (Value, error) {
	left, err := r.eval(e.first, s)
	if err != nil {
		return nil, err
	}
	for i, op := range e.ops {
		right, err := r.eval(e.rest[i], s)
		if err != nil {
			return nil, err
		}
		var ok bool
		switch op {
		case "==":
			ok = equal(left, right)
		case "!=":
			ok = !equal(left, right)
		case "in", "notin":
			ok, err = contains(right, left)
			if err != nil {
				return nil, r.errorf(e.line, "%v", err)
			}
			if op == "notin" {
				ok = !ok
			}
		default:
			c, err := compare(left, right)
			if err != nil {
				return nil, r.errorf(e.line, "%v", err)
			}
			switch op {
			case "<":
				ok = c < 0
			case "<=":
				ok = c <= 0
			case ">":
				ok = c > 0
			case ">=":
				ok = c >= 0
			}
		}
		if !ok {
			return false, nil
		}
		left = right
	}
	return true, nil
}

// contains is Python's "needle in container".
func contains(container, needle Value) (bool, error) {
	switch c := container.(type) {
	case string:
		n, ok := needle.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(needle))
		}
		return strings.Contains(c, n), nil
	case *List:
		for _, it := range c.Items {
			if equal(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		_, ok := c.Get(needle)
		return ok, nil
	case Undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

func (r *renderer) evalSlice(e *sliceExpr, s *scope) (Value, error) {
	obj, err := r.eval(e.obj, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{e.lo, e.hi, e.step} {
		if b == nil {
			continue
		}
		v, err := r.eval(b, s)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := asInt(v)
		if !ok {
			return nil, r.errorf(e.line, "slice indices must be integers or None")
		}
		bounds[i] = &n
	}
	// A slice is built as large as its operand at most.
	if err := r.build(size(obj)); err != nil {
		return nil, r.errorf(e.line, "%v", err)
	}
	var items []Value
	var runes []rune
	var isStr, isTuple bool
	switch o := obj.(type) {
	case *List:
		items, isTuple = o.Items, o.Tuple
	case string:
		runes, isStr = []rune(o), true
	case Undefined:
		return nil, r.errorf(e.line, "'%s' is undefined", o.Name)
	default:
		return nil, r.errorf(e.line, "'%s' object is not subscriptable", typeName(obj))
	}
	n := len(items)
	if isStr {
		n = len(runes)
	}
	idx, err := sliceIndices(n, bounds)
	if err != nil {
		return nil, r.errorf(e.line, "%v", err)
	}
	if isStr {
		out := make([]rune, len(idx))
		for i, j := range idx {
			out[i] = runes[j]
		}
		return string(out), nil
	}
	out := &List{Items: make([]Value, len(idx)), Tuple: isTuple}
	for i, j := range idx {
		out.Items[i] = items[j]
	}
	return out, nil
}

// sliceIndices is Python's slice.indices, expanded.
func sliceIndices(n int, b [3]*int64) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	N := int64(n)
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += N
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		}
		if v >= N {
			if step < 0 {
				return N - 1
			}
			return N
		}
		return v
	}
	var lo, hi int64
	if step > 0 {
		lo, hi = clamp(b[0], 0), clamp(b[1], N)
	} else {
		lo, hi = clamp(b[0], N-1), clamp(b[1], -1)
	}
	var out []int
	if step > 0 {
		for i := lo; i < hi; i += step {
			out = append(out, int(i))
		}
	} else {
		for i := lo; i > hi; i += step {
			out = append(out, int(i))
		}
	}
	return out, nil
}

// evalArgs evaluates a call's or filter's positional and keyword arguments.
func (r *renderer) evalArgs(pos []expr, kw []kwarg, s *scope) ([]Value, []kwValue, error) {
	args := make([]Value, len(pos))
	for i, a := range pos {
		var err error
		if args[i], err = r.eval(a, s); err != nil {
			return nil, nil, err
		}
	}
	kwargs := make([]kwValue, len(kw))
	for i, k := range kw {
		v, err := r.eval(k.v, s)
		if err != nil {
			return nil, nil, err
		}
		kwargs[i] = kwValue{k.name, v}
	}
	return args, kwargs, nil
}

// argsSize is the top-level size of a call's arguments, the work a
// function or filter may do in proportion to them.
func argsSize(args []Value, kwargs []kwValue) int {
	n := 0
	for _, a := range args {
		n += size(a)
	}
	for _, k := range kwargs {
		n += size(k.v)
	}
	return n
}

func (r *renderer) evalCall(e *callExpr, s *scope, caller *macro) (Value, error) {
	if err := r.step(e.line); err != nil {
		return nil, err
	}
	fn, err := r.eval(e.fn, s)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := r.evalArgs(e.args, e.kwargs, s)
	if err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kwargs, caller, e.line)
	case *callable:
		if err := r.work(argsSize(args, kwargs)); err != nil {
			return nil, r.errorf(e.line, "%v", err)
		}
		v, err := f.fn(r, args, kwargs)
		if err == nil {
			err = r.checkBuilt(v)
		}
		if err != nil {
			var te *Error
			if errors.As(err, &te) || errors.Is(err, ErrRaised) {
				return nil, err
			}
			return nil, r.errorf(e.line, "%s: %v", f.name, err)
		}
		return v, nil
	case Undefined:
		if f.Unsafe != "" {
			return nil, r.errorf(e.line, "%s", f.Unsafe)
		}
		return nil, r.errorf(e.line, "'%s' is undefined", f.Name)
	}
	return nil, r.errorf(e.line, "'%s' object is not callable", typeName(fn))
}

// getAttr is Jinja's obj.name: an attribute (methods of strings and
// dicts, namespace and loop fields) first, then an item.
func (r *renderer) getAttr(obj Value, name string, line int) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, r.errorf(line, "'%s' is undefined", undefName(o))
	case *Namespace:
		if v, ok := o.attrs.Get(name); ok {
			return v, nil
		}
		return Undefined{Name: name}, nil
	case *loopState:
		return o.attr(name), nil
	}
	if m := method(obj, name); m != nil {
		return m, nil
	}
	if mutatingMethod(obj, name) {
		return Undefined{Name: name, Unsafe: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj))}, nil
	}
	if d, ok := obj.(*Dict); ok {
		if v, ok := d.Get(name); ok {
			return v, nil
		}
	}
	return Undefined{Name: name}, nil
}

func undefName(u Undefined) string {
	if u.Name == "" {
		return "value"
	}
	return u.Name
}

// getItem is Jinja's obj[key]: an item first, then an attribute.
func (r *renderer) getItem(obj, key Value, line int) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, r.errorf(line, "'%s' is undefined", undefName(o))
	case *Dict:
		if v, ok := o.Get(key); ok {
			return v, nil
		}
	case *List:
		if i, ok := asInt(key); ok {
			if i < 0 {
				i += int64(len(o.Items))
			}
			if i >= 0 && i < int64(len(o.Items)) {
				return o.Items[i], nil
			}
			return Undefined{Name: "item"}, nil
		}
	case string:
		if i, ok := asInt(key); ok {
			rs := []rune(o)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i]), nil
			}
			return Undefined{Name: "item"}, nil
		}
	}
	if name, ok := key.(string); ok {
		return r.getAttr(obj, name, line)
	}
	return Undefined{Name: toStr(key)}, nil
}

// binop evaluates the arithmetic operators with Python's rules.
func (r *renderer) binop(op string, a, b Value) (Value, error) {
	ai, aInt := asInt(a)
	bi, bInt := asInt(b)
	af, aNum := number(a)
	bf, bNum := number(b)
	switch op {
	case "+":
		switch {
		case aInt && bInt:
			return ai + bi, nil
		case aNum && bNum:
			return af + bf, nil
		}
		if as, ok := a.(string); ok {
			if bs, ok := b.(string); ok {
				if len(as)+len(bs) > r.limits.MaxOutput {
					return nil, fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
				}
				if err := r.build(len(as) + len(bs)); err != nil {
					return nil, err
				}
				return as + bs, nil
			}
		}
		if al, ok := a.(*List); ok {
			if bl, ok := b.(*List); ok && al.Tuple == bl.Tuple {
				n := len(al.Items) + len(bl.Items)
				if n > r.limits.MaxItems {
					return nil, fmt.Errorf("list longer than %d items", r.limits.MaxItems)
				}
				if err := r.build(itemBytes * n); err != nil {
					return nil, err
				}
				out := &List{Tuple: al.Tuple, Items: make([]Value, 0, len(al.Items)+len(bl.Items))}
				out.Items = append(append(out.Items, al.Items...), bl.Items...)
				return out, nil
			}
		}
	case "-":
		switch {
		case aInt && bInt:
			return ai - bi, nil
		case aNum && bNum:
			return af - bf, nil
		}
	case "*":
		switch {
		case aInt && bInt:
			return ai * bi, nil
		case aNum && bNum:
			return af * bf, nil
		}
		if bInt {
			return r.repeat(a, bi)
		}
		if aInt {
			return r.repeat(b, ai)
		}
	case "/":
		if aNum && bNum {
			if bf == 0 {
				return nil, errors.New("division by zero")
			}
			return af / bf, nil
		}
	case "//":
		switch {
		case aInt && bInt:
			if bi == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			q := ai / bi
			if (ai%bi != 0) && ((ai < 0) != (bi < 0)) {
				q--
			}
			return q, nil
		case aNum && bNum:
			if bf == 0 {
				return nil, errors.New("float floor division by zero")
			}
			return math.Floor(af / bf), nil
		}
	case "%":
		if as, ok := a.(string); ok {
			return pyFormat(as, b, r.limits.MaxOutput)
		}
		switch {
		case aInt && bInt:
			if bi == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			m := ai % bi
			if m != 0 && (m < 0) != (bi < 0) {
				m += bi
			}
			return m, nil
		case aNum && bNum:
			if bf == 0 {
				return nil, errors.New("float modulo by zero")
			}
			m := math.Mod(af, bf)
			if m != 0 && (m < 0) != (bf < 0) {
				m += bf
			}
			return m, nil
		}
	case "**":
		switch {
		case aInt && bInt && bi >= 0:
			switch {
			case ai == 0 || ai == 1:
				if bi == 0 {
					return int64(1), nil
				}
				return ai, nil
			case ai == -1:
				if bi%2 == 0 {
					return int64(1), nil
				}
				return int64(-1), nil
			case bi > 64:
				return nil, errors.New("integer power too large")
			}
			res := int64(1)
			for range bi {
				res *= ai
			}
			return res, nil
		case aNum && bNum:
			return math.Pow(af, bf), nil
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func (r *renderer) repeat(v Value, n int64) (Value, error) {
	if n < 0 {
		n = 0
	}
	switch v := v.(type) {
	case string:
		if n > int64(r.limits.MaxOutput) || int64(len(v))*n > int64(r.limits.MaxOutput) {
			return nil, fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
		}
		if err := r.build(len(v) * int(n)); err != nil {
			return nil, err
		}
		return strings.Repeat(v, int(n)), nil
	case *List:
		if len(v.Items) == 0 {
			return &List{Tuple: v.Tuple}, nil
		}
		if n > int64(r.limits.MaxItems) || int64(len(v.Items))*n > int64(r.limits.MaxItems) {
			return nil, fmt.Errorf("list longer than %d items", r.limits.MaxItems)
		}
		if err := r.build(itemBytes * len(v.Items) * int(n)); err != nil {
			return nil, err
		}
		out := &List{Tuple: v.Tuple}
		for range n {
			out.Items = append(out.Items, v.Items...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(v))
}

// pyFormat is the subset of Python's "%" string formatting that templates
// use: %s, %r, %d, %i, %f and %%.
func pyFormat(format string, arg Value, limit int) (Value, error) {
	var args []Value
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []Value{arg}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		if b.Len() > limit {
			return nil, fmt.Errorf("string longer than %d bytes", limit)
		}
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, errors.New("incomplete format")
		}
		if format[i] == '%' {
			b.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return nil, errors.New("not enough arguments for format string")
		}
		a := args[next]
		next++
		switch format[i] {
		case 's':
			str := toStr(a)
			if b.Len()+len(str) > limit {
				return nil, fmt.Errorf("string longer than %d bytes", limit)
			}
			b.WriteString(str)
		case 'r':
			writeRepr(&b, a, 0)
		case 'd', 'i':
			f, ok := number(a)
			if !ok {
				return nil, fmt.Errorf("%%d format: a number is required, not %s", typeName(a))
			}
			fmt.Fprintf(&b, "%d", int64(f))
		case 'f':
			f, ok := number(a)
			if !ok {
				return nil, fmt.Errorf("%%f format: a number is required, not %s", typeName(a))
			}
			fmt.Fprintf(&b, "%f", f)
		default:
			return nil, fmt.Errorf("unsupported format character %q", format[i])
		}
	}
	if next < len(args) {
		return nil, errors.New("not all arguments converted during string formatting")
	}
	if b.Len() > limit {
		return nil, fmt.Errorf("string longer than %d bytes", limit)
	}
	return b.String(), nil
}

package jinja

import (
	"fmt"
	"slices"
	"strings"
)

// maxDepth bounds the nesting of expressions and blocks, so a hostile
// template cannot exhaust the stack while being parsed or rendered.
const maxDepth = 200

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) peekAt(k int) token {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) errorf(t token, format string, args ...any) error {
	return &Error{Line: t.line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(v string) bool {
	t := p.peek()
	return t.kind == tOp && t.val == v
}

func (p *parser) isName(v string) bool {
	t := p.peek()
	return t.kind == tName && t.val == v
}

func (p *parser) expectOp(v string) error {
	if t := p.next(); t.kind != tOp || t.val != v {
		return p.errorf(t, "expected '%s', got %s", v, t)
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.next()
	if t.kind != tName {
		return "", p.errorf(t, "expected a name, got %s", t)
	}
	return t.val, nil
}

func (p *parser) expectKind(k tokKind, what string) error {
	if t := p.next(); t.kind != k {
		return p.errorf(t, "expected %s, got %s", what, t)
	}
	return nil
}

func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > maxDepth {
		return p.errorf(t, "template nested more than %d levels deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseBody parses nodes until one of the end tags (a block whose first
// word is in ends), which it consumes, returning its name. With no end
// tags it parses to the end of the template.
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	var nodes []node
	for {
		t := p.next()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.errorf(t, "unexpected end of template, expected {%% %s %%}", strings.Join(ends, " %} or {% "))
			}
			return nodes, "", nil
		case tData:
			nodes = append(nodes, &textNode{text: t.val})
		case tVarBegin:
			e, err := p.parseTuple()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectKind(tVarEnd, "'}}'"); err != nil {
				return nil, "", err
			}
			nodes = append(nodes, &outputNode{e: e, line: t.line})
		case tBlockBegin:
			name := p.peek()
			if name.kind != tName {
				return nil, "", p.errorf(name, "expected a tag name, got %s", name)
			}
			if slices.Contains(ends, name.val) {
				p.next()
				return nodes, name.val, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				nodes = append(nodes, n)
			}
		default:
			return nil, "", p.errorf(t, "unexpected %s", t)
		}
	}
}

func (p *parser) endBlock() error { return p.expectKind(tBlockEnd, "'%}'") }

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(t)
	case "set":
		return p.parseSet(t)
	case "macro":
		return p.parseMacro(t)
	case "call":
		return p.parseCallBlock(t)
	case "filter":
		return p.parseFilterBlock(t)
	case "break", "continue":
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{line: t.line}, nil
		}
		return &continueNode{line: t.line}, nil
	case "generation":
		// transformers' AssistantTracker: the body renders unchanged.
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		return &ifNode{conds: []expr{&literal{v: true}}, bodies: [][]node{body}}, nil
	case "include", "import", "from", "extends", "block":
		return nil, p.errorf(t, "{%% %s %%} is not allowed: chat templates cannot load other templates", t.val)
	}
	return nil, p.errorf(t, "unknown tag %q", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endBlock(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.parseBody("endif"); err != nil {
				return nil, err
			}
		}
		return n, p.endBlock()
	}
}

func (p *parser) parseFor(t token) (node, error) {
	n := &forNode{line: t.line}
	paren := p.isOp("(")
	if paren {
		p.next()
	}
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, name)
		if !p.isOp(",") {
			break
		}
		p.next()
		if p.isName("in") || p.isOp(")") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	if in := p.next(); in.kind != tName || in.val != "in" {
		return nil, p.errorf(in, "expected 'in', got %s", in)
	}
	var err error
	if n.iter, err = p.parseOr(); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.parseExpr(); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf(p.peek(), "recursive loops are not supported")
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.endBlock()
}

func (p *parser) parseSet(t token) (node, error) {
	n := &setNode{line: t.line}
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	switch {
	case p.isOp("."):
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.ns, n.attr = name, attr
	default:
		n.targets = []string{name}
		for p.isOp(",") {
			p.next()
			if p.isOp("=") {
				break
			}
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, name)
		}
	}
	if p.isOp("=") {
		p.next()
		if n.value, err = p.parseTuple(); err != nil {
			return nil, err
		}
		return n, p.endBlock()
	}
	if n.ns != "" || len(n.targets) != 1 {
		return nil, p.errorf(t, "a block {%% set %%} takes one name")
	}
	for p.isOp("|") {
		p.next()
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody("endset"); err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

func (p *parser) parseParams() ([]string, []expr, error) {
	var params []string
	var defaults []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	for !p.isOp(")") {
		name, err := p.expectName()
		if err != nil {
			return nil, nil, err
		}
		var def expr
		if p.isOp("=") {
			p.next()
			if def, err = p.parseExpr(); err != nil {
				return nil, nil, err
			}
		}
		params = append(params, name)
		defaults = append(defaults, def)
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	return params, defaults, p.expectOp(")")
}

func (p *parser) parseMacro(t token) (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, defaults, err := p.parseParams()
	if err != nil {
		return nil, err
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody("endmacro")
	if err != nil {
		return nil, err
	}
	if p.peek().kind == tName { // {% endmacro name %}
		p.next()
	}
	return &macroNode{m: &macro{name: name, params: params, defaults: defaults, body: body, line: t.line}}, p.endBlock()
}

func (p *parser) parseCallBlock(t token) (node, error) {
	n := &callBlockNode{line: t.line}
	if p.isOp("(") {
		params, _, err := p.parseParams()
		if err != nil {
			return nil, err
		}
		n.params = params
	}
	e, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.errorf(t, "{%% call %%} needs a macro call")
	}
	n.call = call
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody("endcall"); err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

func (p *parser) parseFilterBlock(t token) (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.isOp("|") {
			break
		}
		p.next()
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.parseBody("endfilter"); err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

// parseTuple parses an expression, or several separated by commas as a
// tuple.
func (p *parser) parseTuple() (expr, error) {
	first, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return first, nil
	}
	items := []expr{first}
	for p.isOp(",") {
		p.next()
		if t := p.peek(); t.kind == tVarEnd || t.kind == tBlockEnd || p.isOp(")") {
			break
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &tupleExpr{items: items}, nil
}

// parseExpr parses a full expression, including "a if b else c".
func (p *parser) parseExpr() (expr, error) {
	if err := p.enter(p.peek()); err != nil {
		return nil, err
	}
	defer p.leave()
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.isName("else") {
			p.next()
			if els, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		e = &condExpr{cond: cond, then: e, els: els}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.next()
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.next()
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", x: x, line: t.line}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.peek().line
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &cmpExpr{first: first, line: line}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.peekAt(1).kind == tName && p.peekAt(1).val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	line := p.peek().line
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return first, nil
	}
	parts := []expr{first}
	for p.isOp("~") {
		p.next()
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	}
	return &concatExpr{parts: parts, line: line}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "**", l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.peek()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	if t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: t.val, x: x, line: t.line}
	} else if e, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterChain(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tName:
		switch t.val {
		case "true", "True":
			return &literal{v: true}, nil
		case "false", "False":
			return &literal{v: false}, nil
		case "none", "None":
			return &literal{v: nil}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tString:
		s := t.val
		for p.peek().kind == tString {
			s += p.next().val
		}
		return &literal{v: s}, nil
	case tInt, tFloat:
		return &literal{v: t.num}, nil
	case tOp:
		switch t.val {
		case "(":
			if p.isOp(")") {
				p.next()
				return &tupleExpr{}, nil
			}
			first, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if p.isOp(")") {
				p.next()
				return first, nil
			}
			items := []expr{first}
			for p.isOp(",") {
				p.next()
				if p.isOp(")") {
					break
				}
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				items = append(items, e)
			}
			return &tupleExpr{items: items}, p.expectOp(")")
		case "[":
			var items []expr
			for !p.isOp("]") {
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				items = append(items, e)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
			return &listExpr{items: items}, p.expectOp("]")
		case "{":
			d := &dictExpr{}
			for !p.isOp("}") {
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
			return d, p.expectOp("}")
		}
	}
	return nil, p.errorf(t, "unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		t := p.peek()
		switch {
		case t.kind == tOp && t.val == ".":
			p.next()
			n := p.next()
			switch n.kind {
			case tName:
				e = &attrExpr{obj: e, name: n.val, line: n.line}
			case tInt:
				e = &itemExpr{obj: e, key: &literal{v: n.num}, line: n.line}
			default:
				return nil, p.errorf(n, "expected an attribute name, got %s", n)
			}
		case t.kind == tOp && t.val == "[":
			p.next()
			var err error
			if e, err = p.parseSubscript(e, t); err != nil {
				return nil, err
			}
		case t.kind == tOp && t.val == "(":
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr, t token) (expr, error) {
	var parts [3]expr
	n, colons := 0, 0
	for {
		if p.isOp("]") {
			p.next()
			break
		}
		if p.isOp(":") {
			p.next()
			colons++
			n++
			if n > 2 {
				return nil, p.errorf(t, "too many ':' in a slice")
			}
			continue
		}
		if parts[n] != nil {
			return nil, p.errorf(p.peek(), "expected ']' or ':', got %s", p.peek())
		}
		e, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		parts[n] = e
	}
	if colons == 0 {
		if parts[0] == nil {
			return nil, p.errorf(t, "empty subscript")
		}
		return &itemExpr{obj: obj, key: parts[0], line: t.line}, nil
	}
	return &sliceExpr{obj: obj, lo: parts[0], hi: parts[1], step: parts[2], line: t.line}, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	var args []expr
	var kwargs []kwarg
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	for !p.isOp(")") {
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.errorf(p.peek(), "*args and **kwargs in calls are not supported")
		}
		if p.peek().kind == tName && p.peekAt(1).kind == tOp && p.peekAt(1).val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name: name, v: v})
		} else {
			if len(kwargs) > 0 {
				return nil, nil, p.errorf(p.peek(), "positional argument after keyword argument")
			}
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	return args, kwargs, p.expectOp(")")
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.peek().line
	args, kwargs, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwargs: kwargs, line: line}, nil
}

// parseFilterChain parses "| filter", "is test" and calls after a value.
func (p *parser) parseFilterChain(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			t := p.next()
			te := &testExpr{obj: e, line: t.line}
			if p.isName("not") {
				p.next()
				te.negate = true
			}
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			te.name = name
			nt := p.peek()
			switch {
			case p.isOp("("):
				if te.args, _, err = p.parseArgs(); err != nil {
					return nil, err
				}
			case nt.kind == tString || nt.kind == tInt || nt.kind == tFloat ||
				(nt.kind == tName && nt.val != "else" && nt.val != "or" && nt.val != "and") ||
				(nt.kind == tOp && (nt.val == "[" || nt.val == "{")):
				if nt.kind == tName && nt.val == "is" {
					return nil, p.errorf(nt, "cannot chain tests with 'is'")
				}
				arg, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if arg, err = p.parsePostfix(arg); err != nil {
					return nil, err
				}
				te.args = []expr{arg}
			}
			e = te
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseFilter(obj expr) (*filterExpr, error) {
	t := p.peek()
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.next()
		part, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + part
	}
	f := &filterExpr{obj: obj, name: name, line: t.line}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

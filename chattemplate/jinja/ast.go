package jinja

// Statements.
type (
	node interface{}

	textNode   struct{ text string }
	outputNode struct {
		e    expr
		line int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		targets []string
		iter    expr
		cond    expr // optional loop filter
		body    []node
		els     []node
		line    int
	}
	setNode struct {
		targets []string // one name, several to unpack, or none with attr
		ns      string   // {% set ns.attr = ... %}
		attr    string
		value   expr   // nil for a block set
		body    []node // block set
		filters []*filterExpr
		line    int
	}
	macroNode struct {
		m *macro
	}
	callBlockNode struct {
		call   *callExpr
		params []string
		body   []node
		line   int
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	breakNode    struct{ line int }
	continueNode struct{ line int }
)

// Expressions.
type (
	expr interface{}

	literal  struct{ v Value }
	nameExpr struct {
		name string
		line int
	}
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
	attrExpr  struct {
		obj  expr
		name string
		line int
	}
	itemExpr struct {
		obj, key expr
		line     int
	}
	sliceExpr struct {
		obj          expr
		lo, hi, step expr // each may be nil
		line         int
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwargs []kwarg
		line   int
	}
	filterExpr struct {
		obj    expr // nil inside a filter block / set block
		name   string
		args   []expr
		kwargs []kwarg
		line   int
	}
	testExpr struct {
		obj    expr
		name   string
		args   []expr
		negate bool
		line   int
	}
	binExpr struct {
		op   string
		l, r expr
		line int
	}
	unaryExpr struct {
		op   string // "-", "+", "not"
		x    expr
		line int
	}
	andExpr struct{ l, r expr }
	orExpr  struct{ l, r expr }
	cmpExpr struct {
		first expr
		ops   []string // ==, !=, <, <=, >, >=, in, notin
		rest  []expr
		line  int
	}
	condExpr struct {
		cond, then, els expr // els may be nil
	}
	concatExpr struct {
		parts []expr
		line  int
	}
)

type kwarg struct {
	name string
	v    expr
}

// macro is a {% macro %} definition; calling it renders its body.
type macro struct {
	name     string
	params   []string
	defaults []expr // per param, nil when required
	body     []node
	scope    *scope // where it was defined
	line     int
}

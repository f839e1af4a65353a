package contract_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestEveryFieldIsDocumented keeps the record and request types documented
// field by field: `go doc durable.X` shows only the alias, so the contract
// type's field comments are where a user reads what each field means.
func TestEveryFieldIsDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, sp := range gd.Specs {
			ts := sp.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok || !ts.Name.IsExported() {
				continue
			}
			for _, fld := range st.Fields.List {
				if fld.Doc != nil || fld.Comment != nil {
					continue
				}
				name := "(embedded)"
				if len(fld.Names) > 0 {
					name = fld.Names[0].Name
				}
				t.Errorf("contract.%s.%s has no comment", ts.Name.Name, name)
			}
		}
	}
}

package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// modulePath is the module whose version 'durable version' prints.
const modulePath = "github.com/durable-go/durable"

type versionOut struct {
	Module    string `json:"module"`
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"vcs_revision,omitempty"`
	Modified  bool   `json:"vcs_modified,omitempty"`
}

// buildVersion reads the version of the module this binary was built from:
// its tag for 'go install …@v1.2.3', "(devel)" when built from a checkout.
func buildVersion() versionOut {
	v := versionOut{Module: modulePath, Version: "(unknown)", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	if bi.Main.Path == modulePath {
		v.Version = bi.Main.Version
	} else {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				v.Version = d.Version
				if d.Replace != nil {
					v.Version = d.Replace.Version
				}
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func runVersion(ctx context.Context, args []string, e *env) error {
	fs, _ := newFlags(e, "version", "",
		"Print the version of the durable module this binary was built from (its tag\n"+
			"when installed with 'go install …@version', \"(devel)\" from a checkout) and\n"+
			"the Go version. Needs no DSN.")
	asJSON := jsonFlag(fs)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	v := buildVersion()
	if *asJSON {
		return writeJSON(e, v)
	}
	line := fmt.Sprintf("durable %s (%s)", v.Version, v.GoVersion)
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Modified {
			rev += "+modified"
		}
		line += " " + rev
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}

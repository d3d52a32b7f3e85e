package rollout

import (
	"context"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sync"

	"nuon.dev/nuon/schemas"
)

// FleetInstall is an install with the channel it is on.
type FleetInstall struct {
	Install
	Channel string
}

// Fleet assigns the waves of every channel: policies holds each channel's
// policy by name (nil for a channel without rollout), installs every
// install. The result is sorted by channel name. An install on a channel
// policies does not hold is a problem of its file, installs/<id>.yaml.
func Fleet(policies map[string]*Policy, installs []FleetInstall) ([]*Waves, error) {
	by := map[string][]Install{}
	var ps schemas.Problems
	for _, in := range installs {
		if _, ok := policies[in.Channel]; !ok {
			ps = append(ps, schemas.Problem{File: path.Join(schemas.InstallsDir, in.ID+".yaml"), Field: "channel",
				Message: "channel " + in.Channel + " does not exist"})
			continue
		}
		by[in.Channel] = append(by[in.Channel], in.Install)
	}
	var out []*Waves
	for _, ch := range slices.Sorted(maps.Keys(policies)) {
		w, err := Assign(policies[ch], by[ch])
		if err != nil {
			if cps, ok := err.(schemas.Problems); ok {
				ps = append(ps, cps...)
				continue
			}
			return nil, err
		}
		w.Channel = ch
		out = append(out, w)
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Load reads every channel's policy from fsys (a source tree: the files
// of main) and assigns the waves of src's installs: what `nuon render
// --dry-run` shows. src must have been opened from the same tree.
func Load(ctx context.Context, fsys fs.FS, src *schemas.Source) ([]*Waves, error) {
	policies, err := Policies(fsys, src)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var installs []FleetInstall
	err = src.EachInstall(ctx, func(id string, in schemas.Install) {
		if in.Deleted {
			return // it takes no change, so it is in no wave
		}
		mu.Lock()
		defer mu.Unlock()
		installs = append(installs, FleetInstall{Install: Install{ID: id, Labels: in.Labels}, Channel: in.Channel})
	})
	if err != nil {
		return nil, err
	}
	return Fleet(policies, installs)
}

// Policies reads the rollout policy of each of src's channels from fsys
// (nil for a channel without one): what Fleet takes. A policy that does
// not parse is a problem naming its channel file and line.
func Policies(fsys fs.FS, src *schemas.Source) (map[string]*Policy, error) {
	policies := map[string]*Policy{}
	var ps schemas.Problems
	for _, ch := range slices.Sorted(maps.Keys(src.Channels)) {
		file := path.Join(schemas.ChannelsDir, ch+".yaml")
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		p, err := Parse(file, data)
		if cps, ok := err.(schemas.Problems); ok {
			ps = append(ps, cps...)
		} else if err != nil {
			return nil, err
		}
		policies[ch] = p
	}
	if len(ps) > 0 {
		return nil, ps.Err()
	}
	return policies, nil
}

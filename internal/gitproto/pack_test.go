package gitproto

import (
	"crypto/sha1"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

func TestPackChecksum(t *testing.T) {
	body := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00 some objects")
	sum := sha1.Sum(body)
	pack := append(body, sum[:]...)
	bad := append([]byte(nil), pack...)
	bad[5] ^= 1
	for _, chunk := range []int{1, 3, 19, 20, 21, 64} {
		for _, tt := range []struct {
			name string
			in   []byte
			ok   bool
		}{
			{"good", pack, true},
			{"flipped bit", bad, false},
			{"cut short", pack[:len(pack)-1], false},
			{"shorter than a checksum", pack[:10], false},
		} {
			c := &packChecksum{h: sha1.New()}
			for in := tt.in; len(in) > 0; {
				n := min(chunk, len(in))
				c.Write(in[:n])
				in = in[n:]
			}
			if err := c.verify(); (err == nil) != tt.ok {
				t.Errorf("%s in chunks of %d: verify() = %v", tt.name, chunk, err)
			}
		}
	}
}

func TestStorePack(t *testing.T) {
	pack := tinyPack(t)
	blob := plumbing.ComputeHash(plumbing.BlobObject, []byte("replicas: 1\n"))
	for _, d := range destinations {
		for _, chunk := range []int{1, 7, 1000} {
			t.Run(fmt.Sprintf("%s/chunks of %d", d.name, chunk), func(t *testing.T) {
				st, _ := d.new(t)
				err := readFetch(newPktReader(strings.NewReader(sidebandPack(pack, chunk))), nil, func(sb *sidebandReader) error {
					return storePack(st, sb)
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.HasEncodedObject(blob); err != nil {
					t.Errorf("blob %s: %v", blob, err)
				}
			})
		}
	}
}

package etcdstore

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The comparisons built directly are those clientv3.Compare builds.
func TestRawComparesAreClientv3s(t *testing.T) {
	for _, c := range []struct {
		raw  *etcdserverpb.Compare
		want clientv3.Cmp
	}{
		{cmpAbsent([]byte("k")), clientv3.Compare(clientv3.CreateRevision("k"), "=", 0)},
		{cmpModRev([]byte("k"), 7), clientv3.Compare(clientv3.ModRevision("k"), "=", 7)},
	} {
		if !proto.Equal(c.raw, c.want.GetCompare()) {
			t.Errorf("%v, want %v", c.raw, c.want.GetCompare())
		}
	}
}

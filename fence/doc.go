// Package fence implements cairn's writer leases on etcd, in the shape of
// etcd's concurrency package: a lease is a record in etcd, its fencing token is
// an etcd revision, and the guard that every fenced write carries is a list of
// etcd comparisons.
//
// A writer record is two keys, Keys.Owner and Keys.Expiry. Owner holds the
// lease's owner token; its mod revision is the lease's fence, because only an
// acquire writes it. Expiry holds the lease's expiry in milliseconds, encoded
// so that byte order is numeric order; Renew rewrites it. Both keys are
// attached to an etcd lease of the record's own, granted with the Manager's
// TTL: Renew keeps it alive, Release revokes it, and when the holder does
// neither (it died, or abandoned the record), etcd's leader ends it by its own
// timer within the TTL, and the record with it. Keys that must not outlive
// the record, such as a writer's claims, are attached to the same etcd lease
// (Acquired.Lease).
//
// The contract's expiry is always the stored expiry compared with the caller's
// clock, never etcd's lease timer: a lease is current while Expiry > now. This
// lets tests move time, and keeps etcd's coarse, leader-refreshed TTLs out of
// the contract. What the record's existence decides is different: whether its
// holder can still write at all. A record that is still the lease's (not
// replaced, released or ended) may still pass the guard by its holder's clock,
// whatever any other clock says, so nothing that protects the holder's next
// write may be judged dead while the record exists (IfSuperseded).
//
// Acquire is one transaction:
//
//	If   Owner absent
//	Then put Owner, put Expiry (and the caller's reads)
//	Else Txn If   Expiry <= now
//	         Then put Owner, put Expiry (and the caller's reads)
//	         Else get Owner, get Expiry
//
// and the fence is the revision of that transaction, which is higher than every
// earlier fence of the thread because etcd revisions only grow.
//
// Guard returns the three comparisons a fenced write adds to its transaction:
// Owner's mod revision equals the fence, Owner's value equals the token, and
// Expiry is after now. If any of them fails, the write does not happen.
package fence

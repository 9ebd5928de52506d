package console

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/snapshot"
)

// The geometry of the thread graph, in SVG user units.
const (
	graphRow    = 44
	graphLane   = 28
	graphTop    = 24
	graphLeft   = 20
	graphRadius = 7
)

// node is one checkpoint of the thread graph.
type node struct {
	ID, Parent, Reason, Label string
	CreatedAt                 float64
	Head                      bool
	// Lane and Row place the node; X and Y are its centre.
	Lane, Row, X, Y int
	// Added, Changed, Removed count the paths that differ from the parent;
	// NoParent says there is none to compare with (a root, or pruned).
	Added, Changed, Removed int
	NoParent                bool
	// Pruned says the parent was removed: the node's chain starts at a
	// pruned ancestor, drawn as a dashed stub above it.
	Pruned bool
	// Branch says the node starts a new branch of its parent (a fork
	// within the thread: another child came first).
	Branch bool
	Files  int
	Bytes  int64
}

// edge joins a parent to a child.
type edge struct {
	X1, Y1, X2, Y2 int
	// Bend is the path of an edge between lanes.
	Path string
}

type threadData struct {
	ID       string
	Head     string
	Nodes    []node
	Edges    []edge
	Width    int
	Height   int
	Branches int
	Forked   bool // the thread's first checkpoint is a fork root
	Pruned   int  // nodes whose parent was pruned
	// Links are the forks into and out of the thread, with their place in
	// the graph; Scanned is how many other threads were read to find them,
	// and Complete whether that was all of them.
	Links    []placedLink
	Scanned  int
	Complete bool
}

// placedLink is a fork drawn as a square beside its local checkpoint.
type placedLink struct {
	link
	X, Y, LX, LY int
}

// threadPage shows the thread's checkpoints as a timeline (oldest at the
// top) and a graph: each checkpoint joined to its parent, a second child
// of a parent on a lane of its own, fork roots and chains whose start was
// pruned marked as such.
func (c *Console) threadPage(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	id := r.PathValue("thread")
	st := c.cfg.Stores[t]
	head, err := st.GetHead(r.Context(), id)
	if err != nil {
		c.failErr(w, r, fmt.Sprintf("thread %q", id), err)
		return
	}
	list, err := st.List(r.Context(), id)
	if err != nil {
		c.failErr(w, r, fmt.Sprintf("thread %q", id), err)
		return
	}
	if len(list) == 0 {
		c.fail(w, r, t, http.StatusNotFound, fmt.Sprintf("There is no thread %q: it has no checkpoint. The Threads page lists every thread that has one.", id))
		return
	}
	data := layoutThread(id, head, list)
	links, scanned, complete, err := c.forks(r.Context(), t, id, list)
	if err != nil {
		c.failErr(w, r, fmt.Sprintf("the forks of thread %q", id), err)
		return
	}
	data.place(links)
	data.Scanned, data.Complete = scanned, complete
	c.render(w, r, http.StatusOK, "thread", t, "Thread "+id, data)
}

// layoutThread places the checkpoints of a thread, in List order, on rows
// and lanes: a child continues its parent's lane when it is the parent's
// first child, and opens a new lane otherwise; a root opens a new lane.
func layoutThread(id, head string, list []cairn.Checkpoint) threadData {
	d := threadData{ID: id, Head: head}
	index := make(map[string]int, len(list))
	for i := range list {
		index[list[i].ID] = i
	}
	laneOf := make([]int, len(list))
	hasChild := make([]bool, len(list))
	lanes := 0
	for i := range list {
		cp := &list[i]
		n := node{ID: cp.ID, Parent: cp.ParentCheckpointID, Reason: cp.Reason, Label: cp.Label,
			CreatedAt: cp.CreatedAt, Head: cp.ID == head, Row: i}
		for _, e := range cp.Files {
			if e.Kind == cairn.KindFile {
				n.Files++
				n.Bytes += e.Size
			}
		}
		p, ok := index[cp.ParentCheckpointID]
		switch {
		case cp.ParentCheckpointID == "":
			n.NoParent = true
			n.Lane = lanes
			lanes++
		case !ok || p >= i:
			n.NoParent, n.Pruned = true, true
			n.Lane = lanes
			lanes++
			d.Pruned++
		default:
			if hasChild[p] {
				n.Lane = lanes
				lanes++
				n.Branch = true
				d.Branches++
			} else {
				n.Lane = laneOf[p]
			}
			hasChild[p] = true
			for _, ch := range snapshot.Diff(list[p], *cp) {
				switch ch.Kind {
				case snapshot.Added:
					n.Added++
				case snapshot.Removed:
					n.Removed++
				default:
					n.Changed++
				}
			}
		}
		laneOf[i] = n.Lane
		n.X = graphLeft + n.Lane*graphLane
		n.Y = graphTop + i*graphRow
		d.Nodes = append(d.Nodes, n)
	}
	for _, n := range d.Nodes {
		p, ok := index[n.Parent]
		if n.Parent == "" || !ok {
			continue
		}
		pn := d.Nodes[p]
		e := edge{X1: pn.X, Y1: pn.Y, X2: n.X, Y2: n.Y}
		if pn.X != n.X {
			// Leave the parent downwards, bend into the child's lane.
			e.Path = fmt.Sprintf("M%d %d C%d %d %d %d %d %d", pn.X, pn.Y, pn.X, pn.Y+graphRow/2, n.X, pn.Y+graphRow/2, n.X, min(pn.Y+graphRow, n.Y))
			if pn.Y+graphRow < n.Y {
				e.Path += fmt.Sprintf(" L%d %d", n.X, n.Y)
			}
		}
		d.Edges = append(d.Edges, e)
	}
	d.Forked = len(list) > 0 && list[0].Reason == cairn.ReasonForkRoot
	d.Width = graphLeft*2 + max(lanes-1, 0)*graphLane
	d.Height = graphTop*2 + max(len(list)-1, 0)*graphRow
	return d
}

// place puts each fork on a lane right of the graph, on the row of its
// local checkpoint, and widens the graph.
func (d *threadData) place(links []link) {
	row := map[string]node{}
	for _, n := range d.Nodes {
		row[n.ID] = n
	}
	right := d.Width - graphLeft
	for i, l := range links {
		n := row[l.Local]
		x := right + graphLane*(i+1)
		d.Links = append(d.Links, placedLink{link: l, X: x, Y: n.Y, LX: n.X, LY: n.Y})
	}
	if len(links) > 0 {
		// Room for the squares and the last one's label.
		d.Width += graphLane*len(links) + 100
	}
}

// Describe says what the fork is, for the tooltip and screen readers.
func (l placedLink) Describe() string {
	if l.In {
		return fmt.Sprintf("%s was forked from checkpoint %s of thread %s", l.Local, l.Other, l.Thread)
	}
	return fmt.Sprintf("%s was forked into thread %s as %s", l.Local, l.Thread, l.Other)
}

// Text of a node for screen readers and the tooltip.
func (n node) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s", n.ID, n.Reason)
	if n.Label != "" {
		fmt.Fprintf(&b, " %q", n.Label)
	}
	fmt.Fprintf(&b, ", %s", cli.FormatTime(n.CreatedAt))
	switch {
	case n.Pruned:
		b.WriteString(", parent pruned")
	case n.NoParent:
		b.WriteString(", root")
	default:
		fmt.Fprintf(&b, ", +%d ~%d -%d files", n.Added, n.Changed, n.Removed)
	}
	if n.Head {
		b.WriteString(", head")
	}
	return b.String()
}

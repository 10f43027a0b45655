// Package life is the rule a person's confirm-off is refused on (pkg/oncall): the signs
// that a node may be alive, each with the bound past which it counts for nothing, and
// the judgement of them. The incident loop, the watch on the node agents and explain
// gather the signs; this package only judges them, and knows nothing of who gathered
// them. It reads and writes nothing.
package life

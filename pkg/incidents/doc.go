// Package incidents is the record of fencing incidents, the NodeFence objects: it reads
// them from the informer cache (by node, open ones, the facts a decision needs), reads
// the open ones live when a cache may lag, creates them, writes their status at the
// leader's epoch with compare-and-swap, keeps each status within the CRD's limits
// (timeline, text), and deletes the ended ones retention no longer keeps. Its Recorder,
// one per process made by pkg/app for every controller that writes incidents, adds the
// timeline steps, holds each incident's Events until its next save and sends them once
// the save, after a Lease check, went through. It writes NodeFences and their Events,
// and nothing else.
package incidents

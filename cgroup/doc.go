// Package cgroup puts one jail run in a cgroup of its own: it applies the
// run's [Limits] (memory, swap, pids, CPU bandwidth, CPU and I/O weight),
// measures what the run used ([Group.Stats], [Group.CPUUsage]), and kills
// and removes everything at the end ([Group.Destroy]).
//
// [New] creates the group as a child of the cgroup the calling process runs
// in, per hierarchy, because that is where systemd or a container runtime
// delegated rights to it, or under [Options.Parent]. It decides per
// controller: cgroup v2 where the controller is bound to cgroup2, else the
// v1 hierarchy that has it (hybrid hosts). On v1 it creates directories only
// in the hierarchies the limits need (runc and crun create all ten); on any
// host with a usable cgroup2 mount, even a hybrid one whose cgroup2 holds no
// controller, it also creates a cgroup2 directory, which gives cgroup.kill,
// cgroup.events and cpu.stat for free, so no v1 freezer or cpuacct
// directory is needed there.
//
// [Begin] and [Group.Complete] are New in two parts, for a caller that
// starts its process in between: Begin checks what New checks and makes
// only the cgroup2 directory (for CLONE_INTO_CGROUP), Complete makes the v1
// directories and writes every limit. jail completes a run's group while
// its child builds the root, and the child joins the v1 directories only
// then, before its workload starts.
//
// Limits fail closed: a limit this host or caller cannot enforce makes New
// return an *[UnenforcedError] whose one-line message names the limit and
// how to get it, unless [Options.AllowUnenforced] is set.
//
// Getting the run's first process into the group:
//   - cgroup2: start it with clone3 CLONE_INTO_CGROUP ([Group.FD] as
//     SysProcAttr.CgroupFD, Linux 5.7), so it is inside from its first
//     instruction.
//   - v1: [Group.AttachFiles] hands the child open "tasks" files; the child,
//     while single-threaded, writes "0" to each and so moves itself
//     without the RCU grace period a move by pid costs (5 to 15 ms after a
//     quiet spell); or the parent calls [Group.Attach], which pays it.
//
// New, Attach and Destroy need write access to the parent cgroups: root, or
// a delegated subtree. New never writes to a cgroup it did not create:
// it never enables controllers in a parent's cgroup.subtree_control and
// never moves the calling process. On cgroup v2 this means the parent must
// already enable the controllers the limits need, which a cgroup holding
// processes (as the caller's own usually does, except the root cgroup)
// cannot: such callers pass a delegated, process-free parent.
//
// cgroup v1 has no group OOM kill: the OOM killer kills one process and
// Destroy the rest. The package does not use the systemd D-Bus API, does
// not set cpusets, devices or hugetlb limits, and does not nest groups.
//
// It reads and writes cgroup files directly rather than through
// github.com/containerd/cgroups/v3: that library adds 7.3 MB and about
// 0.5 ms to every start of the jail binary (protobuf, cilium/ebpf, dbus and
// logrus come with it), its cgroup2 manager writes cgroup.subtree_control
// in every ancestor up to the root, and its Stat parses every file into
// protobufs where a CPU-time poller needs one number.
//
// Requires Linux 5.12 like the rest of jail; cgroup.kill needs 5.14 (older
// kernels freeze and kill), memory.peak 5.19; pids.peak came with 6.1 or soon after
// (Stats reports nil where the kernel lacks a peak file).
package cgroup

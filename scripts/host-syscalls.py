#!/usr/bin/env python3
"""System calls per operation of each thread of an xfer-bench run, from two
`strace -f` traces of the same command that differ only in --iters (N1 < N2):
the difference divided by N2 - N1 is what one more call costs, without the
setup, the warm-up and the teardown (scripts/device-host.sh, plan sys).

  scripts/host-syscalls.py SHORT.tr N1 LONG.tr N2 [LABEL]

Threads are named by process and creation order: the initiator's process is
the first one traced, the target's is the one it forks; t0 is a process's
main thread (the raw loop and xfer's application thread), t1... the threads
it creates in order (xfer's worker first). Counted: libfabric's wake-up
writes (write(fd, "\\0", 1) to a progress/CQ signal), reads and polls by
file descriptor, and every other call by name. Only what moves by at least
0.01 per operation is shown.
"""
import re
import sys
from collections import Counter, defaultdict

START = re.compile(r'^(\d+)\s+(\w+)\((.*)')
CLONE = re.compile(r'^(\d+)\s+(?:<\.\.\. )?(clone3?|fork|vfork)[( ]')
RESULT = re.compile(r'= (\d+)\s*$')


def load(path):
    """Counts per thread label: {label: Counter}."""
    proc_of, order, threads = {}, [], defaultdict(list)
    counts = defaultdict(Counter)
    thread_flag = {}  # a clone that strace split: its flags are on the first line
    with open(path, errors='replace') as f:
        for line in f:
            m = CLONE.match(line)
            r = RESULT.search(line) if m else None
            if m and 'resumed>' not in line:
                thread_flag[m.group(1)] = 'CLONE_THREAD' in line
            if m and r:
                parent, child = m.group(1), r.group(1)
                if parent not in proc_of:
                    proc_of[parent] = parent
                    order.append(parent)
                    threads[parent].append(parent)
                if thread_flag.get(parent):
                    proc_of[child] = proc_of[parent]
                    threads[proc_of[parent]].append(child)
                else:
                    proc_of[child] = child
                    order.append(child)
                    threads[child].append(child)
            m = START.match(line)
            if not m:
                continue
            tid, call, args = m.groups()
            if tid not in proc_of:  # the first process, before any clone
                proc_of[tid] = tid
                order.append(tid)
                threads[tid].append(tid)
            fd = re.match(r'(?:\[\{fd=)?(\d+)', args)
            fd = fd.group(1) if fd else '?'
            if call == 'write' and re.match(r'\d+, "\\0", 1[) ]', args):
                key = 'signal-write'
            elif call in ('read', 'poll', 'epoll_wait', 'recvfrom', 'sendto', 'sendmsg', 'recvmsg'):
                key = '%s(%s)' % (call, fd)
            else:
                key = call
            counts[tid][key] += 1
    names = {}
    for pi, pid in enumerate(order[:2]):
        side = 'initiator' if pi == 0 else 'target'
        for ti, tid in enumerate(threads[pid]):
            names[tid] = '%s.t%d' % (side, ti)
    out = defaultdict(Counter)
    for tid, c in counts.items():
        out[names.get(tid, 'other')] += c
    return out


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    a, n1, b, n2 = load(sys.argv[1]), int(sys.argv[2]), load(sys.argv[3]), int(sys.argv[4])
    label = sys.argv[5] if len(sys.argv) > 5 else sys.argv[3]
    per = float(n2 - n1)
    print('%s: per operation (%d - %d calls)' % (label, n2, n1))
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name, Counter()), b.get(name, Counter())
        d = {k: (y[k] - x[k]) / per for k in set(x) | set(y)}
        shown = sorted(((k, v) for k, v in d.items() if abs(v) >= 0.01), key=lambda kv: -kv[1])
        if shown:
            print('  %-13s %s' % (name, ' '.join('%s=%.2f' % kv for kv in shown)))


if __name__ == '__main__':
    main()

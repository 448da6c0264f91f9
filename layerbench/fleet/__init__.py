"""A fleet: one plan on many hosts of a Ray cluster, every result in one store.

hosts.py       the hosts: `host head`, `host join`, `host list`; who is joined, alive, busy
requests.py    what the head asks a host (check, describe, probe, run a trial) and its answer
remote.py      what carries a request to its host, and nowhere else: the host's actor, one
               per experiment (a Ray task for a simulated host)
agent.py       on the host: one child process per experiment, serving its requests one at a
               time in the host's scratch root, that tears everything down when its parent
               (the actor) or the head goes away
simulated.py   a host that only pretends (FakeExecutor): the fleet's logic at a scale this
               machine cannot host (bench/fleet.py)
coordinator.py on the head: one experiment per host, each in its own thread, runs stored as
               they end; a lost host's experiment is interrupted, never moved

The trial itself runs through HostExecutor (fleet/executor.py): the experiment on the head
decides what runs next, exactly as it does for a local run.
"""

# A fleet's id: this many hex digits (`run --resume` tells it from an experiment's number).
FLEET_ID_LENGTH = 12

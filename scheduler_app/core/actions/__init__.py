"""The steps of one scheduling pass, one module each (as KAI-Scheduler's ``actions/``), over the
pass's working state (``work.PassWork``). For each request in queue order (``queueing.plan_pass``):

* ``start``: start it where it fits now, its quota pools first; else
* ``reclaim``: preempt the fewest borrowed or spot allocations of other teams that make room for
  within-quota work;
* ``backfill``: after the first blocked request, later ones start only under backfill and only where
  they delay no reservation;
* ``consolidate``: a request the scattered free share cannot hold may wait for a few running jobs to
  move at their next checkpoint, its room reserved (a plan whose moves are made starts first);
* ``reserve``: a request that does not start waits, the first few blocked ones with a reservation,
  each with the cause its user reads;

and at the end ``estimate``: each waiting request's estimated start.
"""

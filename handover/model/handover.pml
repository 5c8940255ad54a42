/*
 * Promela model of the nri-handover protocol as implemented (issue 7).
 *
 * Every step names the Go code it stands for:
 *   handover/coordinator.go  ClaimThen (ready, the settle, awaitTakeBack),
 *                            Claim/claim (one deadline for the whole claim),
 *                            giveUpClaim, askToYield, becomeOwner,
 *                            ensurePublished, takeBackIfOrphaned, ownerAlive,
 *                            demote, setRole, yield (+ superseded, the claim
 *                            deadline), Enter, watch (until_settled),
 *                            watchOwner, watchSuccessor, awaitClaim,
 *                            takeBack, watchUntilGone, promoteIfOrphaned,
 *                            Leave (+ awaitSuccessor, pending, left), Close
 *   handover/dir.go          Dir.Lock (flock on <dir>/lock), Dir.publishOwner
 *                            (link, deadline check, rename of owner.sock,
 *                            bumpOwnerGeneration), ownerGeneration and
 *                            statID (Enter, superseded)
 *   handover/policy.go       NewestInstance.Allow
 *   plugin/adapter.go        adapter.Synchronize (calls ClaimThen with the
 *                            author's Synchronize as ready), adapter.gate /
 *                            enter (every event handler: Enter, act as owner)
 *   plugin/plugin.go         Plugin.Run / serve / connect / disconnect / leave
 * and of the NRI runtime facts the protocol relies on (docs/design.md):
 *   - the runtime serializes events; each event goes to every connected
 *     plugin, one after the other, in an unspecified order (chosen anew,
 *     nondeterministically, for every event);
 *   - a plugin is synchronized under the runtime's sync lock: no event is in
 *     flight while its Synchronize runs, and synchronizations do not overlap;
 *     it is appended to the chain when Synchronize returns and then receives
 *     every later event;
 *   - a plugin that crashes, times out or whose connection breaks is dropped.
 *
 * Run it with `make model` (handover/model/check.sh); docs/model.md explains
 * what is covered, the invariants, the bounds and the findings.
 *
 * Bounds (check.sh runs these configurations, each exhaustively; the exact
 * flags are in check.sh):
 *   c4  NI=3 NEV=1 MAXFAULT=1 MAXSYNC=3   old owner + two newcomers, a crash or
 *                                         a stop, no overrun; run as four jobs
 *                                         by the instance the fault hits
 *                                         (FAULTMASK) and, for the 2nd
 *                                         newcomer, by the kind of fault
 *   c1  NI=2 NEV=4 MAXFAULT=2 MAXSYNC=5   old owner + newcomer, two faults
 *   c2  NI=3 NEV=3 MAXFAULT=0             old owner + two newcomers
 *   o2  NI=2 NEV=2 MAXOVERRUN=1           a claim overruns its deadline
 *   o1  NI=2 NEV=1 MAXFAULT=1 MAXOVERRUN=1 MAXSYNC=2   an overrun and a fault
 *   d1  NI=2 NEV=1 FAULT_DROP (drops only) MAXSYNC=2 (no reconnection)
 *   f6a NI=2 NEV=4 MAXFAULT=1 STOP_DURING_CLAIM CHECK_LEAVE NO_I3
 *   n1  NI=2 NEV=2 MAXNOTREADY=1 MAXSYNC=4  a ready that fails (all the
 *                                         other runs: MAXNOTREADY=0)
 * where
 *   NI        instances (2 or 3). Instance i started before instance i+1:
 *             this is what the newest-instance policy compares. All start
 *             at the beginning; the runtime synchronizes them in any order,
 *             between any two events.
 *   NEV       events the runtime delivers.
 *   MAXFAULT  faults, each of any instance (in FAULTMASK) at any step: a
 *             crash (SIGKILL; not with NO_CRASH), a stop (SIGTERM: Leave,
 *             disconnect, Close; not with NO_STOP) -- by default not racing
 *             with the instance's own claim, promotion or take-back (that
 *             race is F6) -- and, with FAULT_DROP, a stall past the
 *             runtime's request timeout (the runtime drops the live
 *             instance, which reconnects later).
 *   MAXSYNC   Synchronize calls in all (first ones, resyncs, reconnections).
 *   MAXOVERRUN  stalls across a claim deadline (see below).
 *   MAXNOTREADY claims whose ready (the author's Synchronize, run by
 *             ClaimThen before the claim settles) fails or overruns its
 *             settle deadline: a nondeterministic choice of the taker.
 * Timing is abstracted away: every bounded wait (claim lock, Yield answer,
 * Leave, the take-back's lock) may expire at any moment while it waits, and
 * every delay (a Yield request not yet served, a watcher not yet woken) may
 * last across any number of steps of the other processes. So a hung or slow
 * instance is covered by the interleavings themselves.
 *
 * The claim deadline (start + budget) is one flag per running claim,
 * cexp[slot]: "the deadline, and the 100 ms grace after it, have passed".
 * Time only moves forward, and only where someone looks at it, so the flag is
 * set at exactly those points: becomeOwner / publishOwner (the deadline
 * check: the taker stalled before publishing), the yielded owner's
 * awaitClaim timer (takeBackAt = deadline + grace: the taker stalled after
 * publishing, or the owner's goroutine stalled and missed the taker's
 * settling), and the runtime dropping a synchronizing instance (its request
 * timeout is at least twice the budget). Within the budget a claim always
 * gets from the lock to its publish in time (askBy is a quarter of the
 * budget before the deadline, and the rest takes microseconds), so a claim
 * overruns only if something stalls across its deadline: MAXOVERRUN bounds
 * these stalls like faults (0 or 1 in check.sh). The time passing after a
 * claim has ended is free (an ended claim's waiting Yield request counts as
 * past its deadline, see Syncer). The other checks (after the lock: askBy;
 * the owner's yield: wait <= 0) see a deadline that has already passed; a
 * stall right before them leads to the same states as one of the above.
 *
 * Invariants (assertions; "lossy" = a crash, a drop, or the stop of an
 * instance that still owned the plugin or had a claim in flight):
 *   I1  an instance acts on an event only while the owner name leads to it,
 *       and never after it yielded or lost the name, unless it published
 *       itself again (took ownership back)
 *   I2  an event is acted on at most once, except: a second action happens
 *       only if every earlier actor crashed or stopped (Leave done) after
 *       acting and the second one was promoted or took back (unfenced)
 *       during that same delivery
 *   I3  with no lossy fault so far, every event that reaches a synchronized
 *       instance is acted on (with I2: exactly once). Not checked either
 *       after a claim that overran its deadline returned while nobody owned
 *       (F7; with CHECK_OVERRUN checked when an owner had yielded to it)
 *   I4  at most one owner (role owner and the owner name leads to it); two
 *       live instances in the owner role only after a forced takeover (a
 *       name taken from a live owner or from a claim that has published, or
 *       a take-back without the claim lock) or a lossy fault
 *   I5  the protocol never blocks the runtime: all NEV events are delivered
 *   I6  a claim never asks its own instance to yield (F3, fixed; NO_I6)
 *   I7  (CHECK_SYNC_ROLE) the author's Synchronize runs only on the owner
 *       (F5: still fails after a take-back or a busy claim lock)
 *   I8  (CHECK_LEAVE) no instance acts after its Leave (F6a, fixed)
 *   R   (CHECK_RECOVERY) in the end, if an instance is alive and
 *       synchronized, a synchronized one owns (F2, fixed)
 *
 * Variants (-D):
 *   BROKEN_UNFENCED_CLAIM  the newcomer is appended to the chain at once and
 *                          claims at an arbitrary moment, not inside its
 *                          Synchronize (no fence): spin must find a violation.
 *   BROKEN_NO_FENCING      Enter does not check the owner name: spin must
 *                          find a violation (forced takeover of a slow owner).
 *   FAULT_DROP             add the stall-and-drop fault (d1 in the default
 *                          runs since the claim deadline: F4 fixed but for
 *                          PUBLISH_WINDOW)
 *   NO_I2, NO_I3, NO_I6    leave out an invariant (to look for another one)
 * Findings: properties the implementation does NOT have (check.sh findings,
 * docs/model.md):
 *   STRICT_AT_MOST_ONCE    no event acted on twice even around a crash   (F1)
 *   PUBLISH_WINDOW         the deadline check in publishOwner and the
 *                          rename are two steps: with FAULT_DROP, I2
 *                          fails through that window                   (F4)
 *   CHECK_SYNC_ROLE        I7                                          (F5)
 *   STOP_DURING_CLAIM      let a stop race with the instance's own claim
 *                          or take-back: I3 fails                     (F6b)
 *   CHECK_OVERRUN          I3 after an overrun claim an owner yielded to (F7)
 *   (CHECK_OVERRUN with GRANTED_ONLY: only a claim that knows its grant,
 *                          so the one awaitTakeBack is for              (F7)
 *   TAKEBACK_WINDOW        awaitTakeBack sees the name change at the
 *                          predecessor's rename, before its owner role:
 *                          with MAXNOTREADY=1, I3 fails               (F10)
 *   TAKEBACK_RACE          a take-back without the claim lock in its Go
 *                          steps: I2 fails; with CHECK_RECOVERY, R     (F8)
 *   OWNER_LATE             the only overrun is a yielded owner's late
 *                          timer: with a crash of a third instance, I2 (F9)
 */

#ifndef NI
#define NI 2
#endif
#ifndef NEV
#define NEV 3
#endif
#ifndef MAXFAULT
#define MAXFAULT 1
#endif
#ifndef MAXSYNC
#define MAXSYNC (NI + 2)
#endif
#ifndef FAULTMASK
#define FAULTMASK 7             /* the instances faults may hit (a bit set) */
#endif
#ifndef MAXOVERRUN
#define MAXOVERRUN 1            /* claims that may overrun their deadline */
#endif
#ifndef MAXNOTREADY
#define MAXNOTREADY 1           /* claims whose ready (the author's        */
#endif                          /* Synchronize) fails or overruns          */

#define NONE 7                  /* no instance / no claim */
#define HOLDER 6                /* watchSuccessor target: whoever holds the name */
#define bit(i) (1 << (i))
#define LAST (NI - 1)           /* the last instance (1 or 2) */

/* api.Role, and api.YieldResponse.Accepted */
mtype = { JOINING, OWNER, STANDBY, RETIRED, ACCEPT, REFUSE };

/* ---- each instance: Coordinator fields and process facts ---- */
mtype role[NI] = JOINING;       /* c.role                                   */
bool alive[NI];                 /* the process runs (not crashed or exited) */
bool sock[NI];                  /* its instances/<id>.sock answers          */
bool closed[NI];                /* c.closed (Coordinator.Close)             */
bool leaving[NI];               /* c.leaving (Coordinator.Leave)            */
bool left[NI];                  /* c.left: Leave has finished               */
bool claiming[NI];              /* c.claiming (Claim: setClaiming)          */
bool pending[NI];               /* c.pending: yielded, the taker's claim    */
                                /* not yet settled (awaitClaim, takeBack)   */
byte successor[NI];             /* c.successor                              */
byte lastTo[NI];                /* c.lastHandover.ToId                      */
byte watching[NI];              /* standby i has a Watch open on that       */
                                /* instance (it is in its c.watchers)       */
bool wnote[NI];                 /* the instance standby i watches changed   */
                                /* its epoch (became owner) since the Watch */
                                /* began: the Watch answers                 */

/* ---- goroutines started on demand (static processes wait for these) ---- */
bool sreq[2*NI];                /* a Synchronize call, served by Syncer slot */
bool woStart[NI];               /* go c.watchOwner()                         */
chan wsq[NI] = [2] of { byte }; /* go c.watchSuccessor(taker, epoch,         */
                                /* takeBackAt) after a yield; HOLDER: after  */
                                /* retireSupersededLocked (no takeBackAt)    */

/* ---- the claim deadline (one per claim, i.e. per running Syncer slot) ---- */
bool cexp[2*NI];                /* the claim's deadline (+ grace) passed     */
bool serr[2*NI];                /* its Synchronize returned an error         */
                                /* (ErrNotReady): the runtime drops it       */
byte ycl[NI];                   /* the running claim (slot) that sent the    */
                                /* taker's last Yield request; NONE once it  */
                                /* has ended                                 */
bool yexp[NI];                  /* ... the deadline of that ended claim      */
                                /* passed (kept while its request waits)     */
byte awc[NI];                   /* the claim (slot) yielded owner i waits    */
                                /* for in awaitClaim; NONE once it ended     */
bool tbk[NI];                   /* a take-back without the claim lock runs   */
                                /* (in its Go steps: TAKEBACK_RACE)          */

/* ---- the runtime connection (plugin.Run, the stub, the runtime's chain) ---- */
bool wantsync[NI];              /* connected, waiting for its Synchronize   */
bool inchain[NI];               /* synchronized: receives every event       */
bool dropped[NI];               /* dropped while alive: Run reconnects      */
bool resync[NI];                /* a pending OnResync (p.resync, buffer 1)  */
bool retryLater[NI];            /* retryClaimLater's timer is running       */
byte syncing = NONE;            /* being synchronized (sync lock held)      */
byte sg = 0;                    /* ... by this Syncer slot                  */
byte nsync = 0;                 /* Synchronize calls so far                 */

/* ---- the handover directory ---- */
byte name = NONE;               /* owner.sock leads to this one's socket    */
byte lock = NONE;               /* holder of the claim lock (flock)         */

/* ---- the side channel: Yield requests and answers ---- */
chan yq[NI] = [3] of { byte, byte };  /* per server: (taker, request id)    */
byte ypend[NI];                 /* the taker's requests not yet served      */
byte yseq[NI];                  /* id of the taker's last request           */
byte ywait[NI];                 /* server the taker waits on, or NONE       */
bool yready[NI];                /* an answer arrived before the deadline    */
mtype ykind[NI];                /* ACCEPT or REFUSE                         */
byte yowner[NI];                /* resp.Owner                               */

/* ---- faults ---- */
byte faults = 0;                /* faults injected so far                   */
byte overruns = 0;              /* stalls across a claim deadline so far    */
byte notready = 0;              /* ready (the author's Synchronize) failed  */
bool lossy = 0;                 /* a crash or drop, or a stop of an owner   */
                                /* that did not hand over                   */
bool forced = 0;                /* a claim took over without the owner's    */
                                /* answer, a name was taken from a live     */
                                /* owner or a claim that had published, or  */
                                /* a take-back went on without the lock     */
bool late = 0;                  /* F7: a claim that overran its deadline    */
                                /* returned from Synchronize while nobody   */
                                /* owned (e.g. its owner not yet back)      */

/* ---- bookkeeping for the invariants ---- */
byte ev = 0;                    /* events delivered so far                  */
bool delivering = 0;            /* an event is in flight                    */
byte actedBy = 0;               /* who acted on the event in flight         */
byte promotedMid = 0;           /* promoted (outside a Synchronize) while   */
                                /* the event in flight was being delivered  */
bool gaveUp[NI];                /* yielded, or the owner name moved away;   */
                                /* cleared when it publishes itself again   */
bool stopping[NI];              /* received SIGTERM                         */
byte midpub = 0;                /* published, not yet in the owner role     */

#define SET(c) ((c(0) -> 1 : 0) | (c(1) -> 2 : 0) | ((NI > 2 && c(LAST)) -> bit(LAST) : 0))
#define INCHAIN(i) inchain[i]
#define ALIVE(i) alive[i]
#ifdef STOP_DURING_CLAIM
#define CANSYNC(i) (wantsync[i] && alive[i] && (!sreq[2*(i)] || !sreq[2*(i)+1]))
#else
/* (by default no Synchronize starts for an instance being stopped: F6) */
#define CANSYNC(i) (wantsync[i] && alive[i] && !stopping[i] && (!sreq[2*(i)] || !sreq[2*(i)+1]))
#endif
/* the owners: role owner and the owner name leads to it */
#define OWNERS ((alive[0] && role[0] == OWNER && name == 0) + \
                (alive[1] && role[1] == OWNER && name == 1) + \
                (NI > 2 && alive[LAST] && role[LAST] == OWNER && name == LAST))

/* The deadline of running claim g may pass now: it already has, or the  */
/* claimer stalls across it (an overrun; at most MAXOVERRUN in a run).    */
/* Time passing after a claim has ended is free.                          */
#ifdef OWNER_LATE
/* (findings: the only overrun allowed is a yielded owner's late timer) */
#define CANEXP(g) cexp[g]
#else
#define CANEXP(g) (cexp[g] || overruns < MAXOVERRUN)
#endif
inline expire(g) {
  if
  :: !cexp[g] -> cexp[g] = 1; overruns++
  :: else
  fi
}

/* awaitTakeBack's test (since f7b7ddf): the instance behind the owner  */
/* name answers Status with Role OWNER and is not this one (me)          */
#define TBOWNER (name != NONE && name != me && sock[name] && role[name] == OWNER)

/* one instance out of a non-empty set, nondeterministically */
inline pick(set, i) {
  if
  :: (set & 1) -> i = 0
  :: (set & 2) -> i = 1
#if NI > 2
  :: (set & 4) -> i = 2
#endif
  fi
}

/* ================================================================== */
/* One event at one instance: adapter.gate -> adapter.enter ->         */
/* Coordinator.Enter, then the author's handler if the role is owner.  */
/* The events lock is held from Enter to Exit, so nothing else of the  */
/* instance (yield, becomeOwner, demote, Leave) runs between the check  */
/* and the action: one atomic step.                                    */
/* ================================================================== */
inline act(i) {
  /* I1: an instance acts only while the owner name leads to it, and never
     after it yielded or lost the name, unless it published itself again
     (took ownership back) */
  assert(name == i && !gaveUp[i]);
#ifdef CHECK_LEAVE
  /* I8, Leave: "whatever the outcome, the instance acts on no event afterwards" */
  assert(!left[i]);
#endif
  if
  :: actedBy != 0 ->
#ifdef STRICT_AT_MOST_ONCE
     assert(actedBy == 0)
#elif !defined(NO_I2)
     /* I2: a second action on one event only when every earlier actor has
        crashed or stopped (its Leave has finished, or it closed) since
        acting, and this instance was promoted (outside any Synchronize)
        during this very delivery */
     assert((promotedMid & bit(i)) != 0 &&
            ((actedBy & 1) == 0 || !sock[0] || left[0]) &&
            ((actedBy & 2) == 0 || !sock[1] || left[1]) &&
            (NI < 3 || (actedBy & bit(LAST)) == 0 || !sock[LAST] || left[LAST]))
#endif
  :: else
  fi;
  actedBy = actedBy | bit(i)
}

/* Coordinator.retireSupersededLocked: retire, and (unless closed) watch */
/* the instance that holds the name now, as a successor (no takeBackAt)  */
inline retireSuperseded(i) {
  role[i] = RETIRED;
  if
  :: !closed[i] && nfull(wsq[i]) -> wsq[i]!HOLDER
  :: closed[i] || full(wsq[i]) -> skip
  fi
}

inline deliver(i) {
  if
  :: inchain[i] && alive[i] ->
#ifndef BROKEN_NO_FENCING
     /* Coordinator.Enter: an owner whose name leads elsewhere retires */
     /* (superseded(): the owner-name generation, else a stat)          */
     if
     :: role[i] == OWNER && name != i -> retireSuperseded(i)   /* superseded() */
     :: else
     fi;
#endif
     if
     :: role[i] == OWNER -> act(i)   /* the author's handler runs */
     :: else                         /* Plugin.skip */
     fi
  :: else                            /* dead or dropped: not called */
  fi
}

/* ================================================================== */
/* Coordinator.becomeOwner. Caller's locals: me, from, unfenced, pub.  */
/* ================================================================== */

/* Dir.publishOwner: link + rename + bumpOwnerGeneration (the rename and */
/* the bump right after it are one step: in between, an owner that saw   */
/* the name at the old generation would still take it for its own -- a   */
/* difference only when the name is taken from a live owner while events */
/* flow, i.e. outside the default assumptions: F8); the instance that    */
/* held the name loses it                                                */
inline publishSelf() {
  if
  :: name != NONE && name != me ->
     if
     :: alive[name] && (role[name] == OWNER || (midpub & bit(name))) ->
        forced = 1                  /* a live owner (or a claim that has */
                                    /* published) loses the name         */
     :: else
     fi;
     gaveUp[name] = 1
  :: else
  fi;
  name = me;
  gaveUp[me] = 0; midpub = midpub | bit(me)
}

/* some instance watching me is told: my epoch changed (the Watch answers) */
#define NOTE(i) if :: watching[i] == me -> wnote[i] = 1 :: else fi

/* c.events.Lock(); c.mu.Lock(); if c.left: refuse; else c.epoch = epoch, */
/* c.successor = nil, c.pending = false, c.setLocked(ROLE_OWNER). pub = 2 */
/* when the role is set.                                                  */
inline setOwner() {
  midpub = midpub & ~bit(me);
  if
  :: left[me] -> skip                 /* "instance is stopping; not taking ownership" */
  :: else ->
     role[me] = OWNER; successor[me] = NONE; pending[me] = 0;
     if
     :: from != NONE -> lastTo[me] = me   /* c.lastHandover: from -> self */
     :: else
     fi;
     if
     :: unfenced && delivering -> promotedMid = promotedMid | bit(me)
     :: else
     fi;
     NOTE(0); NOTE(1); NOTE(LAST);    /* c.notifyLocked(): a new epoch */
     pub = 2
  fi
}

/* becomeOwner(..., deadline zero): promoteIfOrphaned, takeBackIfOrphaned, */
/* takeBack. guard: what the caller checks right before (takeBack: still  */
/* retired).                                                              */
inline becomeOwner(guard) {
  atomic { alive[me] ->
    if
    :: (guard) && !left[me] && !closed[me] -> publishSelf(); pub = 1
    :: !(guard) || left[me] || closed[me] -> pub = 0   /* hasLeft(): "instance is stopping" */
    fi
  }
  if
  :: pub == 1 -> atomic { alive[me] -> setOwner() }
  :: else
  fi
}

/* Coordinator.demote(ROLE_STANDBY, reason, watch=true), inside an atomic */
inline demoteStandby() {
  if
  :: role[me] != STANDBY && !closed[me] ->
     role[me] = STANDBY;
     woStart[me] = 1                  /* go c.watchOwner() */
  :: else -> role[me] = STANDBY
  fi
}

/* Coordinator.ownerAlive (called with the claim lock): oa = 0 no, 1 yes. */
/* Caller's locals: me, h, s2, oa.                                        */
inline ownerAlive() {
  atomic { alive[me] ->
    h = name;                         /* Dial(owner.sock) */
    oa = ((h == NONE || !sock[h]) -> 0 : 2)   /* ErrNoInstance: no */
  }
  if
  :: oa == 2 ->
     atomic { alive[me] ->            /* cl.Status */
       if
       :: !sock[h] -> oa = 0          /* the connection broke: an exiting instance */
       :: sock[h] && h == me -> oa = 0
       :: sock[h] && h != me && role[h] == OWNER -> oa = 1
       :: sock[h] && h != me && role[h] == RETIRED ->
          /* a retired holder: Dial(InstanceSocket(LastHandover.ToId)) */
          s2 = lastTo[h];
          oa = ((s2 != NONE && s2 != me && sock[s2]) -> 1 : 0)
       :: sock[h] && h != me && (role[h] == STANDBY || role[h] == JOINING) ->
          /* "a standby or joining holder owns nothing: it published, then */
          /* gave ownership back (its ready failed)"                        */
          oa = 0
       fi
     }
  :: else
  fi
}

/* Coordinator.promoteIfOrphaned; result in pr: PROMOTED, ELSEWHERE or  */
/* UNDECIDED. Caller's locals: me, h, s2, oa, from, unfenced, pr, pub.  */
#define PROMOTED  0
#define ELSEWHERE 1
#define UNDECIDED 2
inline promoteIfOrphaned() {
  if
  :: atomic { alive[me] && lock == NONE ->       /* Dir.Lock(ctx) */
       lock = me;
       if
       :: role[me] == OWNER -> pr = PROMOTED; oa = 1
       :: role[me] != OWNER && closed[me] -> pr = UNDECIDED; oa = 1
       :: else -> oa = 0
       fi
     }
     if
     :: oa == 0 ->
        ownerAlive();
        if
        :: oa == 0 ->
           from = NONE; unfenced = 1; becomeOwner(true);
           pr = ((pub == 2) -> PROMOTED : UNDECIDED)   /* "promoted: ..." or "publish failed" */
        :: else -> pr = ELSEWHERE
        fi
     :: else
     fi;
     atomic { lock == me ->                        /* defer unlock() */
       lock = NONE;
       h = NONE; s2 = NONE; from = NONE; oa = 0; unfenced = 0; pub = 0
     }
  :: atomic { alive[me] && lock != NONE -> pr = UNDECIDED }  /* "promotion: claim lock busy" */
  fi
}

/* ================================================================== */
/* adapter.Synchronize -> Coordinator.Claim, run by the runtime's       */
/* Synchronize request (sync lock held), then the author's Synchronize  */
/* if the claim returned owner. Two slots per instance: with FAULT_DROP */
/* a new Synchronize may start while a stalled Claim still runs.        */
/* ================================================================== */
#define D_NONE     0
#define D_ASK      1
#define D_BECOME   2
#define D_STANDBY  3
#define D_GIVEUP   4
#define D_TAKEBACK 5
#define D_DONE     6

#define G (2*me + slot)                /* this claim's Syncer slot */

/* Coordinator.giveUpClaim: only an instance that owns nothing becomes */
/* standby (demote) and asks to claim again later (retryClaimLater)    */
inline giveUpClaim() {
  if
  :: role[me] == JOINING || role[me] == STANDBY ->
     demoteStandby();
     retryLater[me] = 1
  :: else
  fi
}

/* becomeOwner(from, epoch, reason, start, deadline) of a claim: past the */
/* deadline nothing is published (checked first, and in publishOwner      */
/* right before the rename) and the claim gives up; hasLeft() refuses;    */
/* then the role, unless Leave has finished meanwhile.                    */
inline claimBecomeOwner() {
#if defined(PUBLISH_WINDOW) || defined(STOP_DURING_CLAIM)
  atomic { alive[me] ->
    if
    :: CANEXP(G) -> expire(G); pub = 0; giveUpClaim()   /* "deadline passed before publishing" */
    :: !cexp[G] && (left[me] || closed[me]) -> pub = 0   /* hasLeft() */
    :: !cexp[G] && !left[me] && !closed[me] -> pub = 3   /* readEpoch, os.Link(tmp) */
    fi
  }
  if
  :: pub == 3 ->
     atomic { alive[me] ->
#ifdef PUBLISH_WINDOW
       /* the check right before the rename passed in the previous step; */
       /* the rename comes whenever it comes                             */
       publishSelf(); pub = 1
#else
       if
       :: CANEXP(G) -> expire(G); pub = 0; giveUpClaim()  /* publishOwner: errClaimDeadline */
       :: !cexp[G] -> publishSelf(); pub = 1           /* os.Rename(tmp, owner.sock) */
       fi
#endif
     }
  :: else
  fi;
#else
  /* (by default the deadline check in publishOwner and the rename are    */
  /* one step: a stall in the microseconds between them is PUBLISH_WINDOW) */
  atomic { alive[me] ->
    if
    :: CANEXP(G) -> expire(G); pub = 0; giveUpClaim()   /* "deadline passed before publishing" */
    :: !cexp[G] && (left[me] || closed[me]) -> pub = 0   /* hasLeft() */
    :: !cexp[G] && !left[me] && !closed[me] -> publishSelf(); pub = 1   /* publishOwner */
    fi
  }
#endif
  if
  :: pub == 1 -> atomic { alive[me] -> setOwner() }
  :: else
  fi
}

/* an owner that yielded to this claim's instance still waits for it */
#define YIELDED_TO_ME ((pending[0] && successor[0] == me) || (pending[1] && successor[1] == me) || \
                       (NI > 2 && pending[LAST] && successor[LAST] == me))
#define CLRAWC(i) if :: awc[i] == G -> awc[i] = NONE :: else fi

proctype Syncer(byte me; byte slot) {
  byte dec = D_NONE, h = NONE, s2 = NONE, o = NONE, from = NONE, oa = 0, pub = 0;
  byte gfrom = NONE, rr = NONE;       /* grant.from; the role ClaimThen returns */
  bit rdy = 0;                        /* ClaimThen runs ready: owner, !c.superseded() */
  bool redirect = 1, unfenced = 0, locked = 0;
end:
  do
  :: atomic { sreq[G] && alive[me] && lock == NONE ->
       claiming[me] = 1; serr[G] = 0; /* ClaimThen: c.setClaiming(true) */
       lock = me; locked = 1;         /* claim: Dir.Lock(lctx) */
       /* !time.Now().Before(askBy): "budget spent before asking the owner". */
       /* (Only a claim already past its deadline -- dropped before -- gives */
       /* up here: a stall right before this check leads to the same states  */
       /* as a Yield served late and a stall before publishing.)             */
       if
       :: cexp[G] -> dec = D_GIVEUP
       :: !cexp[G] ->
          /* switch c.currentRole() */
          if
          :: role[me] == OWNER && (name == NONE || name == me) ->
             /* !c.superseded(): ensurePublished: Dial(owner.sock), Status: */
             /* self -> nil; nothing there -> publishOwner (no deadline)    */
             if
             :: name == NONE -> name = me; gaveUp[me] = 0
             :: else
             fi;
             dec = D_DONE             /* return c.currentRole(), err */
          :: role[me] == RETIRED -> dec = D_TAKEBACK
          :: else ->
             if
             :: role[me] == OWNER ->
                /* c.superseded(): "claim like any newcomer":          */
                /* c.setRole(ROLE_JOINING, supersededReason)           */
                role[me] = JOINING
             :: else
             fi;
             h = name;                /* Dir.ownerID(); Dial(ctx, owner.sock) */
             /* h == me: "owner name leads to this instance" (it gave     */
             /* ownership back with nobody to take it): becomeOwner;      */
             /* ErrNoInstance: "no owner on the node": becomeOwner        */
             dec = ((h == NONE || h == me || !sock[h]) -> D_BECOME : D_ASK)
          fi
       fi
     }
     if
     :: dec == D_TAKEBACK ->
        /* Coordinator.takeBackIfOrphaned (becomeOwner with no deadline) */
        ownerAlive();
        if
        :: oa == 0 -> from = NONE; unfenced = 0; becomeOwner(true)   /* "successor gone; took ownership back" */
        :: else                                                     /* return ROLE_RETIRED */
        fi;
        dec = D_DONE
     :: dec == D_ASK ->
        /* Coordinator.askToYield(ctx, owner, redirect, deadline) */
ask:    atomic { alive[me] ->
#ifndef NO_I6
          /* I6: a claim never asks its own instance to yield (F3, fixed) */
          assert(h != me);
#endif
          /* owner.Yield(ctx, {Taker: me, ClaimDeadlineUnixNano}) */
          yseq[me] = ((ypend[me] == 0) -> 1 : yseq[me] % 3 + 1);
          ywait[me] = h; yready[me] = 0; ycl[me] = G;
          if
          :: nfull(yq[h]) -> yq[h]!me,yseq[me]; ypend[me]++
          :: full(yq[h]) -> skip      /* (not reached with these bounds) */
          fi
        }
        if
        :: atomic { alive[me] && yready[me] ->
             ywait[me] = NONE;
             if
             :: ykind[me] == ACCEPT ->
                from = yowner[me]; gfrom = yowner[me]; /* grant.from = resp.Owner */
                dec = D_BECOME                         /* "took over from ..." */
             :: ykind[me] == REFUSE && yowner[me] == me ->
                from = NONE; dec = D_BECOME            /* "owner name repaired" */
             :: ykind[me] == REFUSE && yowner[me] != me && yowner[me] != NONE && redirect ->
                o = yowner[me];
                if
                :: sock[o] -> h = o; redirect = 0; dec = D_ASK   /* askToYield(next, false) */
                :: else -> from = NONE; dec = D_BECOME           /* "owner's successor is gone" */
                fi
             :: else -> dec = D_STANDBY                /* demote(STANDBY, resp.Reason) */
             fi;
             yready[me] = 0; ykind[me] = 0; yowner[me] = 0   /* (the answer is consumed) */
           }
        :: atomic { alive[me] ->
             /* ctx (askBy) ended, or the call failed: "owner unresponsive; */
             /* took over". (ctx.Err() == Canceled -- the Synchronize ended  */
             /* -- gives up instead: in the model its request ends only when */
             /* the runtime drops the instance, which sets cexp, or by a     */
             /* stop, after Leave: becomeOwner gives up or refuses likewise.) */
             ywait[me] = NONE;
             forced = 1; from = NONE; dec = D_BECOME
           }
        fi;
        if
        :: dec == D_ASK -> goto ask
        :: else
        fi
     :: else
     fi;
     if
     :: dec == D_BECOME -> unfenced = 0; claimBecomeOwner()
     :: dec == D_STANDBY -> atomic { alive[me] -> demoteStandby() }
     :: dec == D_GIVEUP -> atomic { alive[me] -> giveUpClaim() }
     :: else
     fi;
     goto done
  :: atomic { sreq[G] && alive[me] && lock != NONE ->
       claiming[me] = 1; serr[G] = 0; /* ClaimThen: c.setClaiming(true) */
       /* the claim lock stays busy until lctx (a quarter of the budget) */
       /* ends: giveUpClaim; return c.currentRole()                      */
       giveUpClaim()
     }
done:
     /* claim returns (its deferred unlock); ClaimThen goes on with role */
     atomic { alive[me] ->
       if :: locked && lock == me -> lock = NONE :: else fi;   /* defer unlock() */
       locked = 0; rr = role[me];     /* role, err := c.claim(ctx, w, &grant) */
       /* since f7b7ddf: ready runs only if the claim returned owner and  */
       /* the owner name leads here: role == OWNER && !c.superseded()     */
       /* (a superseded owner retires at its next event); NO_SYNC_CHECK   */
       /* (the code of eb09357): whenever the claim returned owner        */
#ifndef NO_SYNC_CHECK
       rdy = (rr == OWNER && name == me);
#else
       rdy = (rr == OWNER);
#endif
       skip
     }
#ifdef CHECK_SYNC_ROLE
     /* I7: where ready (the author's Synchronize) starts, a step after   */
     /* the superseded check (another instance may publish in between: an */
     /* overdue take-back, F5): runBy starts ready only before settleBy   */
     /* (since the control plane's model; NO_RUNBY_CHECK: the code        */
     /* before, started whenever), and the check and the start are one    */
     /* step (an overdue take-back comes at settleBy + 100 ms at the      */
     /* earliest). Then the instance is the owner with the name (unless   */
     /* it is being stopped: Leave retires it).                           */
#ifndef NO_RUNBY_CHECK
     atomic { alive[me] -> assert(!rdy || cexp[G] || leaving[me] || (name == me && role[me] == OWNER)) }
#else
     atomic { alive[me] -> assert(!rdy || leaving[me] || (name == me && role[me] == OWNER)) }
#endif
#endif
     if
     :: rdy ->
        /* runBy(ctx, w.settleBy, ready): the author's Synchronize runs  */
        /* while the claim is unsettled (claiming) and the lock is free   */
        if
#ifndef NO_RUNBY_CHECK
        :: !cexp[G]                   /* ready returned nil in time: settle below */
#else
        :: true                       /* ready returned nil in time: settle below */
#endif
        :: atomic { alive[me] && (notready < MAXNOTREADY || cexp[G]) ->
             /* (cexp: settleBy passed before ready started: runBy does  */
             /* not start it, ErrNotReady)                                */
             /* ready failed or overran settleBy: ErrNotReady,            */
             /* c.demote(ROLE_STANDBY, "not ready: ...", true)            */
             if :: !cexp[G] -> notready++ :: else fi;
             if :: !closed[me] -> demoteStandby() :: else fi;   /* holdEvents(c.ctx) fails once closed */
             rr = STANDBY; serr[G] = 1;
             /* nobody to give ownership back to (no owner yielded to     */
             /* this claim: a first claimer, a re-synchronizing owner, a  */
             /* forced takeover): the author's failure loses events until */
             /* a promotion -- counted like a fault                       */
             if :: gfrom == NONE -> lossy = 1 :: else fi
           }
        fi
     :: else
     fi;
     if
     :: rr != OWNER && gfrom != NONE ->
        /* granted (the owner accepted the Yield) but not settled as owner */
        atomic { alive[me] -> claiming[me] = 0 }   /* c.setClaiming(false): settled */
        /* c.awaitTakeBack(grant.from, w.returnBy): poll Status behind   */
        /* the owner name until another instance answers as owner (since  */
        /* f7b7ddf; OLD_TAKEBACK: the code of eb09357, poll Dir.ownerID() */
        /* until the name leads elsewhere)                                */
end_tb: if
#ifndef OLD_TAKEBACK
        :: atomic { alive[me] && ((TBOWNER) || closed[me]) -> skip }   /* Role == OWNER, another id; or c.ctx done */
        :: atomic { alive[me] && !(TBOWNER) && !closed[me] && (!sock[gfrom] || closed[gfrom] || (awc[gfrom] != G && empty(wsq[gfrom]))) -> skip }
           /* returnBy passed, and the predecessor is gone or its awaitClaim / */
           /* takeBack is over without taking back: it never will              */
        :: atomic { alive[me] && !(TBOWNER) && !closed[me] && overruns < MAXOVERRUN -> overruns++ }
           /* returnBy passed while a take-back was still coming (a stall)     */
#else
#ifdef TAKEBACK_WINDOW
        :: atomic { alive[me] && (name != me || closed[me]) -> skip }   /* id != c.ownSocket, or c.ctx done */
#else
        /* (by default the predecessor's becomeOwner goes from its rename   */
        /* to the owner role -- writeEpoch, holdEvents, setLocked -- before */
        /* this poll, the return to the runtime and the runtime's next      */
        /* event reach it: the name counts as changed once the role is set; */
        /* TAKEBACK_WINDOW drops this assumption: F10)                      */
        :: atomic { alive[me] && ((name != me && !(midpub & bit(name))) || closed[me]) -> skip }   /* id != c.ownSocket, or c.ctx done */
#endif
        :: atomic { alive[me] && name == me && !closed[me] && (!sock[gfrom] || closed[gfrom] || (awc[gfrom] != G && empty(wsq[gfrom]))) -> skip }
           /* returnBy passed, and the predecessor is gone or its awaitClaim / */
           /* takeBack is over without taking back: it never will              */
        :: atomic { alive[me] && name == me && !closed[me] && overruns < MAXOVERRUN -> overruns++ }
           /* returnBy passed while a take-back was still coming (a stall)     */
#endif
        fi
     :: else
     fi;
     atomic { alive[me] ->
       claiming[me] = 0;              /* c.setClaiming(false): settled */
       /* F7: a claim that overran its deadline gave up, and returns (the */
       /* runtime runs events again) while nobody owns the plugin -- its   */
       /* yielded owner has not taken back yet, or there is no owner at    */
       /* all: events are missed until someone takes ownership outside the */
       /* fence. Counted like a lossy fault for I3; with CHECK_OVERRUN     */
       /* not when an owner had yielded to (granted) this claim.           */
       if
#if defined(CHECK_OVERRUN) && defined(GRANTED_ONLY)
       /* (F7 on a claim that knows it was granted: awaitTakeBack ran) */
       :: cexp[G] && OWNERS == 0 && gfrom == NONE -> late = 1
#elif defined(CHECK_OVERRUN)
       :: cexp[G] && OWNERS == 0 && !YIELDED_TO_ME && gfrom == NONE -> late = 1
#else
       :: cexp[G] && OWNERS == 0 -> late = 1
#endif
       :: else
       fi;
       /* (model bookkeeping: the claim is over; a request it sent that  */
       /* still waits keeps its deadline in yexp. Such a claim stopped   */
       /* waiting at askBy (or was dropped), so its deadline is at most  */
       /* a quarter of the budget away, and an owner that served the     */
       /* request after a forced takeover would have to hold the name    */
       /* again by then: by default its deadline counts as passed. A     */
       /* stop cancels a claim at any time: then it may still be ahead.) */
       if
#ifdef STOP_DURING_CLAIM
       :: ycl[me] == G -> yexp[me] = (cexp[G] && ypend[me] != 0); ycl[me] = NONE
#else
       :: ycl[me] == G -> yexp[me] = (ypend[me] != 0); ycl[me] = NONE
#endif
       :: else
       fi;
       CLRAWC(0); CLRAWC(1); CLRAWC(LAST);
       cexp[G] = 0;
       sreq[G] = 0;                   /* Synchronize returns (an error: serr) */
       dec = D_NONE; h = NONE; s2 = NONE; o = NONE; from = NONE; oa = 0; pub = 0;
       redirect = 1; unfenced = 0; locked = 0; gfrom = NONE; rr = NONE
     }
  od
}

/* ================================================================== */
/* Coordinator.yield, served on the instance's own socket (the ttrpc   */
/* service). A request may wait here for any time (the instance is     */
/* slow or hung): the taker's deadline may expire first, and the answer */
/* is then lost, but the request is still served.                      */
/* ================================================================== */
inline reply(t, sq, kk, oo) {
  if
  :: ywait[t] == me && yseq[t] == sq -> yready[t] = 1; ykind[t] = kk; yowner[t] = oo
  :: else                             /* the taker gave up: answer lost */
  fi
}

proctype YieldServer(byte me) {
  byte t, sq, c;
  bool ex;
end:
  do
  :: atomic { alive[me] && sock[me] && nempty(yq[me]) ->
       yq[me]?t,sq; ypend[t]--;
       /* the taker's claim deadline, req.ClaimDeadlineUnixNano: of its */
       /* running claim, of its ended claim, or long past (an older one) */
       c = NONE;
       if
       :: yseq[t] == sq && ycl[t] != NONE -> c = ycl[t]; ex = cexp[c]
       :: yseq[t] == sq && ycl[t] == NONE ->
          if                          /* (its deadline may pass now too) */
          :: true -> ex = 1
          :: true -> ex = yexp[t]
          fi
       :: yseq[t] != sq -> ex = 1
       fi;
       if :: ypend[t] == 0 -> yexp[t] = 0 :: else fi;   /* (bookkeeping) */
       /* c.events.Lock(); c.mu.Lock() */
       if
       :: role[me] == OWNER && name != me ->
          /* superseded(): the request waited while this instance did not */
          /* answer, and its sender took over by force meanwhile          */
          retireSuperseded(me);       /* retireSupersededLocked */
          reply(t, sq, REFUSE, successor[me])
       :: role[me] != OWNER ->
          reply(t, sq, REFUSE, successor[me])   /* "not the owner" */
       :: role[me] == OWNER && name == me ->
          if
          :: ex ->
             /* wait <= 0: "the taker's claim deadline passed": refused. */
             /* The taker's ctx ended at askBy, before: the answer is    */
             /* lost. (A running claim's deadline passes here only if it */
             /* has already passed: a taker stalled past it while this   */
             /* request waited ends up as when it gave up first, and the */
             /* request is then refused as one of an ended claim.)       */
             skip
          :: !ex && !leaving[me] && t < me ->
             reply(t, sq, REFUSE, successor[me])   /* NewestInstance.Allow: the taker is older */
          :: !ex && (leaving[me] || t > me) ->
             successor[me] = t; lastTo[me] = t;
             role[me] = RETIRED; gaveUp[me] = 1;   /* "yielded to ..." */
             if
             :: !closed[me] && nfull(wsq[me]) ->
                pending[me] = 1; awc[me] = c;      /* c.pending = true */
                wsq[me]!t                          /* go c.watchSuccessor(taker, epoch, deadline + grace) */
             :: closed[me] || full(wsq[me]) -> skip
             fi;
             reply(t, sq, ACCEPT, me)
          fi
       fi;
       t = 0; sq = 0; c = 0; ex = 0
     }
  od
}

/* ================================================================== */
/* Coordinator.watchSuccessor, on a retired instance: after a yield     */
/* first awaitClaim and, if the taker did not take ownership, takeBack; */
/* then watchUntilGone and promoteIfOrphaned.                           */
/* ================================================================== */
#define C_OWNED    0
#define C_NOTOWNED 1
#define C_OVERDUE  2
#define C_GONE     3
#define C_STOPPED  4

proctype WatchSuccessor(byte me) {
  byte s = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0, pr = 0, r = 0, pub = 0;
  bool unfenced = 0, got = 0, await = 0;
end:
  do
  :: atomic { wsq[me]?s ->
       if
       :: s == HOLDER ->
          /* retireSupersededLocked's goroutine: Dial(owner.sock), Status: */
          /* watch the holder (none reachable: take back at once)          */
          s = ((name != NONE && sock[name]) -> name : NONE); await = 0
       :: else -> await = 1           /* takeBackAt set */
       fi
     }
     if
     :: await ->
        /* awaitClaim(taker, epoch, takeBackAt): Dial(taker), Watch with */
        /* until_settled: the taker answers once it is neither joining   */
        /* nor claiming (or closes)                                      */
end_await:
        if
        :: atomic { alive[me] && !closed[me] && !sock[s] -> r = C_GONE; pending[me] = 0; awc[me] = NONE }   /* err: claimGone */
        :: atomic { alive[me] && !closed[me] && sock[s] && role[s] != JOINING && !claiming[s] ->
             /* resp.Epoch > epoch (it owned and handed on: retired with a */
             /* successor) || resp.Role == OWNER && resp.Epoch == epoch    */
             r = ((role[s] == OWNER || (role[s] == RETIRED && successor[s] != NONE)) -> C_OWNED : C_NOTOWNED);
             if
             :: r == C_OWNED -> pending[me] = 0; awc[me] = NONE   /* no take-back: c.pending = false */
             :: else
             fi
           }
#ifdef OWNER_LATE
        :: atomic { alive[me] && !closed[me] && ((awc[me] != NONE && cexp[awc[me]]) || (awc[me] == NONE && overruns < MAXOVERRUN)) ->
#else
        :: atomic { alive[me] && !closed[me] && ((awc[me] != NONE && cexp[awc[me]]) || overruns < MAXOVERRUN) ->
#endif
             /* ctx (takeBackAt = the taker's deadline + grace) ended   */
             /* before the Watch answered: claimOverdue. Either the     */
             /* taker's claim stalled across its deadline (+ grace), or */
             /* it settled in time and this goroutine stalled instead:  */
             /* an overrun either way, unless the claim was already     */
             /* past its deadline (dropped).                            */
             if
             :: awc[me] != NONE -> expire(awc[me])
             :: else -> overruns++
             fi;
             r = C_OVERDUE
           }
        :: atomic { alive[me] && closed[me] -> r = C_STOPPED; pending[me] = 0; awc[me] = NONE }   /* c.ctx done: claimStopped */
        fi;
        if
        :: r == C_OVERDUE || r == C_NOTOWNED ->
           /* Coordinator.takeBack(why, overdue): Dir.Lock(lctx), lctx */
           /* 5 ms if overdue (the hung taker may hold the lock), else */
           /* a quarter of the budget                                  */
           if
           :: atomic { alive[me] && lock == NONE -> lock = me; got = 1 }
           :: atomic { alive[me] && lock != NONE -> got = 0 }
           fi;
           if
           :: got -> ownerAlive()     /* "the taker did finish after all, or another claim won" */
#ifdef TAKEBACK_RACE
           :: !got -> atomic {
                if
                :: r == C_OVERDUE && !closed[me] ->
                   /* "claim lock held (by the overdue taker?); going on   */
                   /* without it": "as after a forced takeover" (design)   */
                   oa = 0; tbk[me] = 1; forced = 1
                :: else -> oa = 1        /* "take-back: claim lock busy" */
                fi }
#else
           :: !got && r != C_OVERDUE -> oa = 1   /* "take-back: claim lock busy" */
           :: !got && r == C_OVERDUE ->
              /* "claim lock held (by the overdue taker?); going on without  */
              /* it": "as after a forced takeover" (design). By default the  */
              /* design's timing argument holds: takeBackAt (deadline + 100  */
              /* ms) comes before the runtime gives up on the hung taker's   */
              /* Synchronize, so the runtime still waits for the Synchronize */
              /* of the overdue claim (no event in flight), and the taker    */
              /* stays hung until the take-back is done: the take-back is   */
              /* one step (becomeOwner with no deadline: hasLeft,            */
              /* publishOwner, the role). Otherwise it is not taken back     */
              /* from. TAKEBACK_RACE drops this assumption: the steps as in  */
              /* Go (F8).                                                    */
              atomic { alive[me] ->
                oa = 1;
                if
                :: !closed[me] && awc[me] != NONE && syncing == s && sg == awc[me] && role[me] == RETIRED && !left[me] ->
                   forced = 1; from = NONE; unfenced = 1;
                   publishSelf(); setOwner()   /* "took ownership back: ..." */
                :: else
                fi
              }
#endif
           fi;
           if
           :: oa == 0 ->
              /* if c.currentRole() != ROLE_RETIRED: return; becomeOwner */
              from = NONE; unfenced = 1; becomeOwner(role[me] == RETIRED)   /* "took ownership back: ..." */
           :: else
           fi;
           atomic {
             if :: got && lock == me -> lock = NONE :: else fi;   /* defer unlock() */
             tbk[me] = 0; got = 0; h = NONE; s2 = NONE; oa = 0; unfenced = 0; pub = 0;
             pending[me] = 0;                  /* c.pending = false (also when a later */
                                               /* yield set it meanwhile: one flag)     */
             if :: empty(wsq[me]) -> awc[me] = NONE :: nempty(wsq[me]) -> skip fi   /* (bookkeeping) */
           }
        :: else                       /* claimOwned; claimGone: the loop below promotes */
        fi;
        r = 0
     :: else
     fi;
     do   /* for c.ctx.Err() == nil && c.currentRole() == ROLE_RETIRED */
     :: atomic { !(alive[me] && !closed[me] && role[me] == RETIRED) -> skip } -> break
     :: atomic { nempty(wsq[me]) -> skip } -> break
        /* (a later yield started another watchSuccessor goroutine: the */
        /* model follows that one; this one only watches the same taker) */
     :: atomic { alive[me] && !closed[me] && role[me] == RETIRED ->
          oa = ((s != NONE && sock[s]) -> 0 : 1)   /* Dial(InstanceSocket(successor)) */
        }
        if
        :: oa == 0 ->
           /* watchUntilGone: cl.Watch answers when the successor (once  */
           /* settled: not joining, not claiming) changes role or epoch, */
           /* leaves, or closes; it fails when the connection breaks     */
end_watch:
           if
           :: atomic { alive[me] && !sock[s] -> skip }           /* err: gone */
           :: atomic { alive[me] && sock[s] && role[s] == RETIRED && !claiming[s] && !leaving[s] && !closed[s] ->
                oa = 2 }                                           /* handed on in order */
           :: atomic { alive[me] && sock[s] && (closed[s] || (leaving[s] && role[s] != JOINING && !claiming[s])) -> skip } ->
end_closed:
              atomic { (alive[me] && !sock[s]) || closed[me] -> skip }   /* <-cl.Closed() */
           :: atomic { alive[me] && closed[me] -> oa = 2 }       /* c.ctx done */
           :: atomic { nempty(wsq[me]) -> oa = 2 }               /* (a later yield's goroutine) */
           fi
        :: else
        fi;
        if
        :: oa == 2 -> break
        :: else ->
           if
           :: atomic { alive[me] && closed[me] -> skip } -> break   /* c.ctx.Err() != nil */
           :: atomic { alive[me] && !closed[me] -> skip } ->
              promoteIfOrphaned();      /* "successor ... gone" */
              if
              :: pr == ELSEWHERE -> pr = 0; break   /* another live instance owns the plugin */
              :: else -> pr = 0                     /* promoted, or undecided: retry.Wait, loop */
              fi
           fi
        fi
     od;
     atomic { s = NONE; h = NONE; s2 = NONE; from = NONE; oa = 0; unfenced = 0; pr = 0; pub = 0; await = 0 }
  od
}

/* ================================================================== */
/* Coordinator.watchOwner, on a standby (started by demote).           */
/* ================================================================== */
proctype WatchOwner(byte me) {
  byte w = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0, pr = 0, pub = 0;
  bool unfenced = 0;
end:
  do
  :: atomic { woStart[me] -> woStart[me] = 0 }
     do   /* for c.currentRole() == ROLE_STANDBY */
     :: atomic { !(alive[me] && !closed[me] && role[me] == STANDBY) -> skip } -> break
     :: atomic { alive[me] && !closed[me] && role[me] == STANDBY ->
          w = name;                   /* Dial(owner.sock) */
          if
          :: w != NONE && sock[w] -> watching[me] = w; wnote[me] = 0   /* cl.Status; cl.Watch: in w's c.watchers */
          :: else -> w = NONE
          fi
        }
        if
        :: w == NONE -> promoteIfOrphaned(); pr = 0   /* ErrNoInstance: "owner gone" */
        :: else ->
end_watch:
           if
           :: atomic { alive[me] && !sock[w] -> watching[me] = NONE; wnote[me] = 0; w = NONE } ->
              promoteIfOrphaned(); pr = 0   /* Watch failed: "owner connection lost" */
           :: atomic { alive[me] && sock[w] && role[w] != JOINING && !claiming[w] &&
                       (role[w] != OWNER || leaving[w] || wnote[me]) ->
                /* Watch answered: the owner (settled) leaves, stops */
                /* owning, or its epoch changed                      */
                watching[me] = NONE; wnote[me] = 0; w = NONE;
                if
                :: role[me] == STANDBY -> resync[me] = 1   /* OnResync -> requestResync */
                :: else
                fi
              }
           :: atomic { alive[me] && closed[me] -> watching[me] = NONE; wnote[me] = 0; w = NONE }   /* c.ctx done */
           fi
        fi
     od
  od
}

/* ================================================================== */
/* Plugin.Run / Plugin.serve: a pending resync is honoured only by a    */
/* standby whose Synchronize returned; a lost connection is reconnected. */
/* ================================================================== */
proctype Run(byte me) {
end:
  do
  :: atomic { alive[me] && !closed[me] && resync[me] ->
       resync[me] = 0;                /* case reason := <-p.resync */
       if
       :: inchain[me] && role[me] == STANDBY ->
          inchain[me] = 0;            /* p.disconnect(c) */
          wantsync[me] = 1            /* p.connect: a new Synchronize */
       :: else                        /* "resync not needed" */
       fi
     }
  :: atomic { alive[me] && !closed[me] && retryLater[me] ->
       /* Coordinator.retryClaimLater, a second later */
       retryLater[me] = 0;
       if
       :: role[me] == STANDBY -> resync[me] = 1   /* OnResync("claim lock was busy") */
       :: else
       fi
     }
  :: atomic { alive[me] && !closed[me] && dropped[me] && syncing != me ->
       dropped[me] = 0;               /* case <-c.closed: lost; reconnect */
       wantsync[me] = 1
     }
  od
}

/* ================================================================== */
/* Faults, at any step, of any live instance.                          */
/* ================================================================== */
/* A stop loses events (is "lossy") if the stopping instance owns the     */
/* plugin (owner role, or the owner name with a claim about to make it     */
/* owner), or if a claim, promotion or take-back of it is in flight (by    */
/* default; STOP_DURING_CLAIM checks that race: F6). (A promotion or take- */
/* back may also start after Leave began: hence the checks at the later    */
/* steps too.)                                                             */
#define INFLIGHT(v) (sreq[2*(v)] || sreq[2*(v)+1] || lock == v || tbk[v])
#ifdef STOP_DURING_CLAIM
/* F6: a stop may also race with a claim or promotion of the instance */
#define STOPOK(v) true
#define LOSSYSTOP(v) if :: role[v] == OWNER || (name == v && (midpub & bit(v))) -> lossy = 1 :: else fi
#else
/* by default a stop does not race with the instance's own claim,        */
/* promotion or take-back (that race is finding F6)                      */
#define STOPOK(v) !INFLIGHT(v)
#define LOSSYSTOP(v) if :: role[v] == OWNER || (name == v && (midpub & bit(v))) || INFLIGHT(v) -> lossy = 1 :: else fi
#endif


/* Note: an option must not begin with an if (or an atomic beginning with */
/* an if) that has an else: spin then takes that else as an option of the  */
/* enclosing if, where it is never executable next to an always-executable */
/* option. Hence "true ->" before the stop.                                */
active proctype Faults() {
  byte v, sb;
  do
  :: atomic { faults < MAXFAULT && (SET(ALIVE) & FAULTMASK) != 0 ->
       v = SET(ALIVE) & FAULTMASK;
       pick(v, v);
       faults++
     }
     if
#ifndef NO_CRASH
     :: atomic {                      /* crash (SIGKILL) */
          alive[v] = 0; sock[v] = 0;  /* its socket no longer answers */
          inchain[v] = 0; wantsync[v] = 0;   /* the runtime drops it */
          lossy = 1;
          if :: lock == v -> lock = NONE :: else fi   /* the kernel drops its flock */
        }
#endif
#ifdef FAULT_DROP
     :: atomic {                      /* stalled past the runtime's request */
          inchain[v] = 0; wantsync[v] = 0; dropped[v] = 1;   /* timeout: dropped */
          lossy = 1;
          /* the request timeout is at least twice a claim's budget: a */
          /* claim of v that runs now is past its deadline             */
          if :: sreq[2*v] -> cexp[2*v] = 1 :: else fi;
          if :: sreq[2*v+1] -> cexp[2*v+1] = 1 :: else fi
        }
#endif
#ifndef NO_STOP
     :: /* stop (SIGTERM): Plugin.Run -> Plugin.leave -> Coordinator.Leave */
        atomic { STOPOK(v) ->         /* (a plain guard first: see the note above) */
          stopping[v] = 1;
          if
          :: role[v] == OWNER ->
             /* owner := c.role == OWNER: c.leaving = true, notifyLocked */
             /* (tells its standbys); it keeps acting                   */
             sb = 1; leaving[v] = 1
          :: else
          fi
        }
        if
        :: sb != 0 ->
           /* awaitSuccessor(ctx): until handed over -- not owner, and no  */
           /* yielded successor pending -- to a standby or to any newcomer */
           /* that claims meanwhile (a leaving owner yields regardless of  */
           /* policy); or until ctx ends: the leave timeout, or the own    */
           /* runtime connection lost (Plugin.leave(c.closed))             */
           if
           :: atomic { role[v] != OWNER && !pending[v] -> skip }
           :: skip                    /* ctx ends: "no successor took over in time" */
           fi
        :: else
        fi;
        atomic {                      /* holdEvents(ctx) (a handler that never returns */
                                      /* is left behind: deliveries are atomic here):  */
                                      /* retire, "stopped"                             */
          LOSSYSTOP(v);
          leaving[v] = 1; left[v] = 1;   /* c.leaving = true; c.left = true */
          if
          :: role[v] != RETIRED -> role[v] = RETIRED
          :: else
          fi
        }
        atomic { LOSSYSTOP(v); inchain[v] = 0; wantsync[v] = 0 }   /* p.disconnect(c) */
        atomic { closed[v] = 1; sock[v] = 0 }         /* Coordinator.Close */
        atomic {                      /* the process exits */
          LOSSYSTOP(v);
          alive[v] = 0;
          if :: lock == v -> lock = NONE :: else fi
        }
#endif
     fi;
     v = 0; sb = 0
  :: break
  od
}

/* ================================================================== */
/* The runtime: NEV serialized events, each delivered to every plugin   */
/* in the chain in a nondeterministic order; the Synchronize of a       */
/* connecting plugin under the sync lock, between two events.           */
/* ================================================================== */
active proctype Runtime() {
  byte i, pend;
  bool chainAtStart;
end:
  do
  :: atomic { ev < NEV && syncing == NONE ->   /* a CRI call: BlockPluginSync */
       delivering = 1; actedBy = 0; promotedMid = 0;
       pend = SET(INCHAIN); chainAtStart = (pend != 0)
     }
     do
     :: atomic { pend != 0 ->
          pick(pend, i);
          pend = pend & ~bit(i);
          deliver(i)
        }
     :: atomic { pend == 0 -> break }
     od;
     atomic {
       /* I3: with no lossy fault so far, an event that reaches a      */
       /* synchronized instance is acted on (and, by I2, only once)     */
#ifndef NO_I3
       assert(lossy || late || !chainAtStart || actedBy != 0);
#endif
       delivering = 0; actedBy = 0; promotedMid = 0; chainAtStart = 0; i = 0;
       ev++
     }
  :: atomic { syncing == NONE && nsync < MAXSYNC && SET(CANSYNC) != 0 ->
       pend = SET(CANSYNC);
       pick(pend, i);
       pend = 0; nsync++;
       /* the runtime calls Synchronize: a free Syncer slot of i serves it */
       sg = (!sreq[2*i] -> 2*i : 2*i + 1);
       sreq[sg] = 1;
#ifdef BROKEN_UNFENCED_CLAIM
       /* no fence: in the chain at once; the claim runs whenever it runs, */
       /* events flowing meanwhile                                         */
       wantsync[i] = 0; inchain[i] = 1; sg = 0; i = 0
#else
       syncing = i                    /* sync lock: no event in flight */
#endif
     }
#ifndef BROKEN_UNFENCED_CLAIM
     /* wait for the response to Synchronize, or for the plugin's drop */
     atomic { !sreq[sg] || !wantsync[i] || !alive[i] ->
       if
       :: !sreq[sg] && wantsync[i] && alive[i] && !serr[sg] -> inchain[i] = 1   /* appended */
       :: !sreq[sg] && wantsync[i] && alive[i] && serr[sg] ->
          /* Synchronize failed (ErrNotReady): the runtime drops the */
          /* plugin; Plugin.Run reconnects later                     */
          dropped[i] = 1; serr[sg] = 0
       :: else
       fi;
       wantsync[i] = 0;
       syncing = NONE; sg = 0; i = 0
     }
#endif
  od
}

/* ================================================================== */
/* Invariants checked in every state.                                  */
/* I4: at most one owner (role owner and the owner name leads to it);  */
/* and two live instances in the owner role only after a forced        */
/* takeover (the stale one is fenced out at its next event or Yield:    */
/* I1) or a lossy fault.                                               */
/* ================================================================== */
#define ROLEOWNERS ((alive[0] && role[0] == OWNER) + (alive[1] && role[1] == OWNER) + \
                    (NI > 2 && alive[LAST] && role[LAST] == OWNER))
#define I4 (OWNERS <= 1 && (ROLEOWNERS <= 1 || forced || lossy))

active proctype Invariants() {
end:
  atomic { !I4 -> assert(I4) }
}

/* At the end, when nothing can move any more. */
#define CONNOWNER ((inchain[0] && role[0] == OWNER && name == 0) || \
                   (inchain[1] && role[1] == OWNER && name == 1) || \
                   (NI > 2 && inchain[LAST] && role[LAST] == OWNER && name == LAST))
#define OWNS_SOON(i) ((inchain[i] || (wantsync[i] && alive[i])) && role[i] == OWNER)
#define STALEOWNER (OWNS_SOON(0) || OWNS_SOON(1) || (NI > 2 && OWNS_SOON(LAST)))
active proctype Final() {
end:
  timeout ->
  /* I5: the protocol never blocks the runtime: every event was delivered */
  assert(ev == NEV);
#ifdef CHECK_RECOVERY
  /* if an instance is alive and synchronized, a synchronized instance */
  /* owns the plugin, or is in the owner role and will, at its next     */
  /* event, either act or retire (superseded) and take back; or an      */
  /* owner waits for the Synchronize MAXSYNC no longer allows           */
  assert(SET(INCHAIN) == 0 || CONNOWNER || STALEOWNER)
#endif
}

init {
  byte i;
  atomic {
    do
    :: i < NI ->
       /* plugin.New -> handover.New serves the instance's own socket; */
       /* Plugin.Run connects to the runtime                            */
       alive[i] = 1; sock[i] = 1; wantsync[i] = 1;
       successor[i] = NONE; lastTo[i] = NONE; watching[i] = NONE; ywait[i] = NONE;
       ycl[i] = NONE; awc[i] = NONE;
       run YieldServer(i); run Run(i); run Syncer(i, 0); run Syncer(i, 1);
       run WatchOwner(i); run WatchSuccessor(i);
       i++
    :: else -> break
    od
  }
}

/*
 * Promela model of the nri-handover protocol as implemented (issue 7).
 *
 * Every step names the Go code it stands for:
 *   handover/coordinator.go  Claim/claim, askToYield, becomeOwner,
 *                            ensurePublished, takeBackIfOrphaned, ownerAlive,
 *                            demote, yield (+ superseded), Enter, watch,
 *                            watchOwner, watchSuccessor, watchUntilGone,
 *                            promoteIfOrphaned, Leave, Close
 *   handover/dir.go          Dir.Lock (flock on <dir>/lock), Dir.publishOwner
 *                            (link + rename of owner.sock), statID (Enter)
 *   handover/policy.go       NewestInstance.Allow
 *   plugin/adapter.go        adapter.Synchronize (calls Claim), adapter.gate /
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
 * Bounds (check.sh runs these configurations, each exhaustively):
 *   c1  NI=2 NEV=4 MAXFAULT=2 MAXSYNC=5   old owner + newcomer, two faults
 *   c2  NI=3 NEV=3 MAXFAULT=0             old owner + two newcomers
 *   c3  NI=3 NEV=1 MAXFAULT=1 MAXSYNC=4   old owner + two newcomers, a fault
 *       (run as three jobs, FAULTMASK=1, 2, 4: the fault hits instance 0,
 *       1 or 2; together exactly the state space of one run)
 * where
 *   NI        instances (2 or 3). Instance i started before instance i+1:
 *             this is what the newest-instance policy compares. All start
 *             at the beginning; the runtime synchronizes them in any order,
 *             between any two events.
 *   NEV       events the runtime delivers.
 *   MAXFAULT  faults, each of any instance (in FAULTMASK) at any step: a
 *             crash (SIGKILL), or a stop (SIGTERM: Leave, disconnect,
 *             Close) -- by default not racing with the instance's own claim
 *             or promotion (that race is F6); with -DFAULT_DROP also a stall
 *             past the runtime's request timeout (the runtime drops the live
 *             instance, which reconnects later).
 *   MAXSYNC   Synchronize calls in all (first ones, resyncs, reconnections).
 * Timing is abstracted away: every bounded wait (claim lock, Yield answer,
 * Leave) may expire at any moment while it waits, and every delay (a Yield
 * request not yet served, a watcher not yet woken) may last across any
 * number of steps of the other processes. So a hung or slow instance is
 * covered by the interleavings themselves.
 *
 * Invariants (assertions; "lossy" = a crash, a drop, or the stop of an
 * instance that still owned the plugin or had a claim in flight):
 *   I1  an instance acts on an event only while the owner name leads to it,
 *       and never after it yielded or lost the name, unless it published
 *       itself again (took ownership back)
 *   I2  an event is acted on at most once, except: a second action happens
 *       only if every earlier actor crashed or stopped after acting and the
 *       second one was promoted (unfenced) during that same delivery
 *   I3  with no lossy fault so far, every event that reaches a synchronized
 *       instance is acted on (with I2: exactly once)
 *   I4  at most one owner (role owner and the owner name leads to it); two
 *       live instances in the owner role only after a forced takeover or a
 *       lossy fault
 *   I5  the protocol never blocks the runtime: all NEV events are delivered
 *
 * Variants (-D):
 *   BROKEN_UNFENCED_CLAIM  the newcomer is appended to the chain at once and
 *                          claims at an arbitrary moment, not inside its
 *                          Synchronize (no fence): spin must find a violation.
 *   BROKEN_NO_FENCING      Enter does not check the owner name: spin must
 *                          find a violation (forced takeover of a slow owner).
 * Findings: properties the implementation does NOT have (check.sh findings,
 * docs/model.md):
 *   STRICT_AT_MOST_ONCE    no event acted on twice even around a crash   (F1)
 *   CHECK_RECOVERY         in the end, if an instance is alive and
 *                          synchronized, a synchronized one owns         (F2)
 *   CHECK_SELF_YIELD       a claim never asks its own instance to yield  (F3)
 *   FAULT_DROP             add the stall-and-drop fault: I2 fails        (F4)
 *   CHECK_SYNC_ROLE        the author's Synchronize runs only on the
 *                          owner (with FAULT_DROP and NO_I2)             (F5)
 *   STOP_DURING_CLAIM      let a stop race with the instance's own claim:
 *                          with CHECK_LEAVE it acts after Leave (F6a);
 *                          with three instances I3 fails              (F6b)
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

#define NONE 7                  /* no instance */
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
byte successor[NI];             /* c.successor                              */
byte lastTo[NI];                /* c.lastHandover.ToId                      */
byte watching[NI];              /* standby i has a Watch open on that       */
                                /* instance (it is in its c.watchers)       */

/* ---- goroutines started on demand (static processes wait for these) ---- */
bool sreq[2*NI];                /* a Synchronize call, served by Syncer slot */
bool woStart[NI];               /* go c.watchOwner()                         */
chan wsq[NI] = [2] of { byte }; /* go c.watchSuccessor(taker)                */

/* ---- the runtime connection (plugin.Run, the stub, the runtime's chain) ---- */
bool wantsync[NI];              /* connected, waiting for its Synchronize   */
bool inchain[NI];               /* synchronized: receives every event       */
bool dropped[NI];               /* dropped while alive: Run reconnects      */
bool resync[NI];                /* a pending OnResync (p.resync, buffer 1)  */
bool retryLater[NI];            /* retryClaimLater's timer is running       */
byte syncing = NONE;            /* being synchronized (sync lock held)      */
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
bool lossy = 0;                 /* a crash or drop, or a stop of an owner   */
                                /* that did not hand over                   */
bool forced = 0;                /* a claim took over without the owner's    */
                                /* answer (Yield deadline or error)         */

/* ---- bookkeeping for the invariants ---- */
byte ev = 0;                    /* events delivered so far                  */
bool delivering = 0;            /* an event is in flight                    */
byte actedBy = 0;               /* who acted on the event in flight         */
byte promotedMid = 0;           /* promoted (outside a Synchronize) while   */
                                /* the event in flight was being delivered  */
bool gaveUp[NI];                /* yielded, or the owner name moved away;   */
                                /* cleared when it publishes itself again   */
bool stopping[NI];              /* received SIGTERM                         */
bool leftByStop[NI];               /* Leave retired it ("stopped")             */
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
  /* Leave: "whatever the outcome, the instance acts on no event afterwards" */
  assert(!leftByStop[i]);
#endif
  if
  :: actedBy != 0 ->
#ifdef STRICT_AT_MOST_ONCE
     assert(actedBy == 0)
#elif !defined(NO_I2)
     /* I2: a second action on one event only when every earlier actor has
        crashed or stopped since acting, and this instance was promoted
        (outside any Synchronize) during this very delivery */
     assert((promotedMid & bit(i)) != 0 &&
            ((actedBy & 1) == 0 || !sock[0]) &&
            ((actedBy & 2) == 0 || !sock[1]) &&
            (NI < 3 || (actedBy & bit(LAST)) == 0 || !sock[LAST]))
#endif
  :: else
  fi;
  actedBy = actedBy | bit(i)
}

/* Coordinator.retireSupersededLocked: retire, and (unless closed) watch */
/* the instance that holds the name now, as a successor                  */
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
/* Coordinator.becomeOwner (called with the claim lock): publish first, */
/* then, under the events lock, role = owner. Caller's locals: me,      */
/* from, unfenced.                                                     */
/* ================================================================== */
inline becomeOwner() {
  atomic { alive[me] ->
    /* Dir.publishOwner: link + rename, one atomic step */
    if
    :: name != NONE && name != me ->
       if
       :: alive[name] && role[name] == OWNER -> forced = 1   /* a live owner loses the name */
       :: else
       fi;
       gaveUp[name] = 1
    :: else
    fi;
    name = me;
    gaveUp[me] = 0; midpub = midpub | bit(me)
  }
  atomic { alive[me] ->
    /* c.events.Lock(); c.setLocked(ROLE_OWNER, reason) */
    role[me] = OWNER; midpub = midpub & ~bit(me);
    successor[me] = NONE;
    if
    :: from != NONE -> lastTo[me] = me   /* c.lastHandover: from -> self */
    :: else
    fi;
    if
    :: unfenced && delivering -> promotedMid = promotedMid | bit(me)
    :: else
    fi
  }
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
       :: sock[h] && h != me && role[h] != OWNER ->
          /* a retired holder: Dial(InstanceSocket(LastHandover.ToId)) */
          s2 = lastTo[h];
          oa = ((s2 != NONE && s2 != me && sock[s2]) -> 1 : 0)
       fi
     }
  :: else
  fi
}

/* Coordinator.promoteIfOrphaned; result in pr: PROMOTED, ELSEWHERE or  */
/* UNDECIDED. Caller's locals: me, h, s2, oa, from, unfenced, pr.          */
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
        :: oa == 0 -> from = NONE; unfenced = 1; becomeOwner(); pr = PROMOTED   /* "promoted: ..." */
        :: else -> pr = ELSEWHERE
        fi
     :: else
     fi;
     atomic { lock == me ->                        /* defer unlock() */
       lock = NONE;
       h = NONE; s2 = NONE; from = NONE; oa = 0; unfenced = 0
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
#define D_ENSURE   4
#define D_TAKEBACK 5
#define D_DONE     6

proctype Syncer(byte me; byte slot) {
  byte dec = D_NONE, h = NONE, s2 = NONE, o = NONE, from = NONE, oa = 0;
  bool redirect = 1, unfenced = 0, retOwner = 0, locked = 0;
end:
  do
  :: atomic { sreq[2*me + slot] && alive[me] && lock == NONE ->
       lock = me; locked = 1;         /* claim: Dir.Lock(lctx) */
       /* switch c.currentRole() */
       if
       :: role[me] == OWNER -> dec = D_ENSURE
       :: role[me] == RETIRED -> dec = D_TAKEBACK
       :: else ->
          h = name;                   /* Dial(ctx, owner.sock) */
          dec = ((h == NONE || !sock[h]) -> D_BECOME : D_ASK)  /* ErrNoInstance: "no owner on the node" */
       fi
     }
     if
     :: dec == D_ENSURE ->
        /* Coordinator.ensurePublished */
        atomic { alive[me] ->
          h = name;                   /* Dial(owner.sock), cl.Status */
          if
          :: h == NONE || !sock[h] -> name = me; gaveUp[me] = 0   /* publishOwner */
          :: h == me && sock[h] -> skip
          :: h != me && h != NONE && sock[h] && role[h] == OWNER ->
             role[me] = RETIRED       /* demote(RETIRED, "superseded by") */
          :: h != me && h != NONE && sock[h] && role[h] != OWNER ->
             gaveUp[h] = 1; name = me; gaveUp[me] = 0   /* publishOwner */
          fi;
          retOwner = 1;               /* return ROLE_OWNER, nil */
          dec = D_DONE
        }
     :: dec == D_TAKEBACK ->
        /* Coordinator.takeBackIfOrphaned */
        ownerAlive();
        dec = ((oa == 0) -> D_BECOME : D_DONE)   /* "successor gone; took ownership back" */
     :: dec == D_ASK ->
        /* Coordinator.askToYield(ctx, owner, redirect) */
ask:    atomic { alive[me] ->
#ifndef NO_I6
          /* I6: a claim never asks its own instance to yield (F3, fixed) */
          assert(h != me);
#endif
          /* owner.Yield(ctx, {Taker: me}) */
          yseq[me] = ((ypend[me] == 0) -> 1 : yseq[me] % 3 + 1);
          ywait[me] = h; yready[me] = 0;
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
                from = yowner[me]; dec = D_BECOME      /* "took over from ..." */
             :: ykind[me] == REFUSE && yowner[me] == me ->
                from = NONE; dec = D_BECOME            /* "owner name repaired" */
             :: ykind[me] == REFUSE && yowner[me] != me && yowner[me] != NONE && redirect ->
                o = yowner[me];
                if
                :: sock[o] -> h = o; redirect = 0; dec = D_ASK   /* askToYield(next, false) */
                :: else -> from = NONE; dec = D_BECOME           /* "owner's successor is gone" */
                fi
             :: else -> dec = D_STANDBY                /* demote(STANDBY, resp.Reason) */
             fi
           }
        :: atomic { alive[me] ->
             /* the deadline (half the budget) expired, or the call failed */
             ywait[me] = NONE;
             forced = 1; from = NONE; dec = D_BECOME   /* "owner unresponsive; took over" */
           }
        fi;
        if
        :: dec == D_ASK -> goto ask
        :: else
        fi
     :: else
     fi;
     if
     :: dec == D_BECOME -> unfenced = 0; becomeOwner(); retOwner = 1
     :: dec == D_STANDBY -> atomic { alive[me] -> demoteStandby() }
     :: else
     fi;
     goto done
  :: atomic { sreq[2*me + slot] && alive[me] && lock != NONE ->
       /* the claim lock stays busy until lctx ends: only an instance  */
       /* that owns nothing becomes standby (demote) and asks to claim */
       /* again later (retryClaimLater); return c.currentRole()        */
       if
       :: role[me] == JOINING || role[me] == STANDBY ->
          demoteStandby();
          retryLater[me] = 1
       :: else -> retOwner = (role[me] == OWNER)
       fi
     }
done:
     atomic { alive[me] ->
       if :: locked && lock == me -> lock = NONE :: else fi;   /* defer unlock() */
#ifdef CHECK_SYNC_ROLE
       /* adapter.Synchronize runs the author's Synchronize if the    */
       /* claim returned owner: the instance must then be the owner       */
       /* (unless it is being stopped: Leave retires it meanwhile)        */
       assert(!retOwner || leaving[me] || (role[me] == OWNER && name == me));
#endif
       sreq[2*me + slot] = 0;         /* Synchronize returns */
       dec = D_NONE; h = NONE; s2 = NONE; o = NONE; from = NONE; oa = 0;
       redirect = 1; unfenced = 0; retOwner = 0; locked = 0
     }
  od
}

/* ================================================================== */
/* Coordinator.yield, served on the instance's own socket (the ttrpc   */
/* service). A request may wait here for any time (the instance is     */
/* slow or hung): the taker's deadline may expire first, and the answer */
/* is then lost, but the request still takes effect when served.       */
/* ================================================================== */
inline reply(t, sq, kk, oo) {
  if
  :: ywait[t] == me && yseq[t] == sq -> yready[t] = 1; ykind[t] = kk; yowner[t] = oo
  :: else                             /* the taker gave up: answer lost */
  fi
}

proctype YieldServer(byte me) {
  byte t, sq;
end:
  do
  :: atomic { alive[me] && sock[me] && nempty(yq[me]) ->
       yq[me]?t,sq; ypend[t]--;
       /* c.events.Lock(); c.mu.Lock() */
       if
       :: role[me] == OWNER && name != me ->
          /* superseded(): the request waited while this instance did not */
          /* answer, and its sender took over by force meanwhile          */
          retireSuperseded(me);       /* retireSupersededLocked */
          reply(t, sq, REFUSE, successor[me])
       :: role[me] != OWNER ->
          reply(t, sq, REFUSE, successor[me])   /* "not the owner" */
       :: role[me] == OWNER && name == me && !leaving[me] && t < me ->
          reply(t, sq, REFUSE, successor[me])   /* NewestInstance.Allow: the taker is older */
       :: role[me] == OWNER && name == me && (leaving[me] || t > me) ->
          successor[me] = t; lastTo[me] = t;
          role[me] = RETIRED; gaveUp[me] = 1;   /* "yielded to ..." */
          if
          :: !closed[me] && nfull(wsq[me]) -> wsq[me]!t   /* go c.watchSuccessor(taker) */
          :: closed[me] || full(wsq[me]) -> skip
          fi;
          reply(t, sq, ACCEPT, me)
       fi;
       t = 0; sq = 0
     }
  od
}

/* ================================================================== */
/* Coordinator.watchSuccessor / watchUntilGone, on a retired instance. */
/* ================================================================== */
proctype WatchSuccessor(byte me) {
  byte s = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0, pr = 0;
  bool unfenced = 0;
end:
  do
  :: atomic { wsq[me]?s ->
       if
       :: s == HOLDER ->
          /* retireSupersededLocked's goroutine: Dial(owner.sock), Status: */
          /* watch the holder (none reachable: take back at once)          */
          s = ((name != NONE && sock[name]) -> name : NONE)
       :: else
       fi
     }
     do   /* for c.ctx.Err() == nil && c.currentRole() == ROLE_RETIRED */
     :: atomic { !(alive[me] && !closed[me] && role[me] == RETIRED) -> skip } -> break
     :: atomic { alive[me] && !closed[me] && role[me] == RETIRED ->
          oa = ((s != NONE && sock[s]) -> 0 : 1)   /* Dial(InstanceSocket(successor)) */
        }
        if
        :: oa == 0 ->
           /* watchUntilGone: cl.Watch answers when the successor (once  */
           /* settled, i.e. not joining) changes role or epoch, leaves, */
           /* or closes; it fails when the connection breaks            */
end_watch:
           if
           :: atomic { alive[me] && !sock[s] -> skip }           /* err: gone */
           :: atomic { alive[me] && sock[s] && role[s] == RETIRED && !leaving[s] && !closed[s] ->
                oa = 2 }                                           /* handed on in order */
           :: atomic { alive[me] && sock[s] && (closed[s] || (leaving[s] && role[s] != JOINING)) -> skip } ->
end_closed:
              atomic { (alive[me] && !sock[s]) || closed[me] -> skip }   /* <-cl.Closed() */
           :: atomic { alive[me] && closed[me] -> oa = 2 }       /* c.ctx done */
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
              :: pr == ELSEWHERE -> break   /* another live instance owns the plugin */
              :: else                       /* promoted, or undecided: retry.Wait, loop */
              fi
           fi
        fi
     od;
     atomic { s = NONE; h = NONE; s2 = NONE; from = NONE; oa = 0; unfenced = 0; pr = 0 }
  od
}

/* ================================================================== */
/* Coordinator.watchOwner, on a standby (started by demote).           */
/* ================================================================== */
proctype WatchOwner(byte me) {
  byte w = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0, pr = 0;
  bool unfenced = 0;
end:
  do
  :: atomic { woStart[me] -> woStart[me] = 0 }
     do   /* for c.currentRole() == ROLE_STANDBY */
     :: atomic { !(alive[me] && !closed[me] && role[me] == STANDBY) -> skip } -> break
     :: atomic { alive[me] && !closed[me] && role[me] == STANDBY ->
          w = name;                   /* Dial(owner.sock) */
          if
          :: w != NONE && sock[w] -> watching[me] = w   /* cl.Status; cl.Watch: in w's c.watchers */
          :: else -> w = NONE
          fi
        }
        if
        :: w == NONE -> promoteIfOrphaned()   /* ErrNoInstance: "owner gone" */
        :: else ->
end_watch:
           if
           :: atomic { alive[me] && !sock[w] -> watching[me] = NONE; w = NONE } ->
              promoteIfOrphaned()     /* Watch failed: "owner connection lost" */
           :: atomic { alive[me] && sock[w] && (closed[w] || (role[w] != JOINING && (role[w] != OWNER || leaving[w]))) ->
                /* Watch answered: the owner leaves, stops owning or changed */
                watching[me] = NONE; w = NONE;
                if
                :: role[me] == STANDBY -> resync[me] = 1   /* OnResync -> requestResync */
                :: else
                fi
              }
           :: atomic { alive[me] && closed[me] -> watching[me] = NONE; w = NONE }   /* c.ctx done */
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
/* owner), or if a claim or promotion of it is in flight: Leave does not   */
/* stop that, so it may make the leaving instance owner afterwards (F6).   */
/* (A claim may also start after Leave began: hence the checks at the     */
/* later steps too.)                                                       */
#define INFLIGHT(v) (sreq[2*(v)] || sreq[2*(v)+1] || lock == v)
#ifdef STOP_DURING_CLAIM
/* F6: a stop may also race with a claim or promotion of the instance */
#define STOPOK(v) true
#define LOSSYSTOP(v) if :: role[v] == OWNER || (name == v && (midpub & bit(v))) -> lossy = 1 :: else fi
#else
/* by default a stop does not race with the instance's own claim or      */
/* promotion (that race is finding F6)                                   */
#define STOPOK(v) !INFLIGHT(v)
#define LOSSYSTOP(v) if :: role[v] == OWNER || (name == v && (midpub & bit(v))) || INFLIGHT(v) -> lossy = 1 :: else fi
#endif

/* some live standby has a Watch open on v (Leave's standbys) */
#define WATCHES(i) (alive[i] && watching[i] == v)
#define STANDBYS(v) SET(WATCHES)
#define ANYALIVE(b) (((b & 1) && sock[0]) || ((b & 2) && sock[1]) || (NI > 2 && (b & bit(LAST)) && sock[LAST]))

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
     :: atomic {                      /* crash (SIGKILL) */
          alive[v] = 0; sock[v] = 0;  /* its socket no longer answers */
          inchain[v] = 0; wantsync[v] = 0;   /* the runtime drops it */
          lossy = 1;
          if :: lock == v -> lock = NONE :: else fi   /* the kernel drops its flock */
        }
#ifdef FAULT_DROP
     :: atomic {                      /* stalled past the runtime's request */
          inchain[v] = 0; wantsync[v] = 0; dropped[v] = 1;   /* timeout: dropped */
          lossy = 1
        }
#endif
#ifndef NO_STOP
     :: /* stop (SIGTERM): Plugin.Run -> Plugin.leave -> Coordinator.Leave */
        atomic { STOPOK(v) ->         /* (a plain guard first: see the note above) */
          stopping[v] = 1;
          if
          :: role[v] == OWNER && STANDBYS(v) != 0 ->
             sb = STANDBYS(v);        /* the ids in c.watchers */
             leaving[v] = 1           /* tell the standbys */
          :: else
          fi
        }
        if
        :: leaving[v] ->
           if
           :: atomic { role[v] != OWNER || !ANYALIVE(sb) -> skip }   /* handed over, or no standby alive */
           :: skip                    /* ctx ends: "no standby took over in time" */
           fi
        :: else
        fi;
        atomic {                      /* c.events.Lock(): retire, "stopped" */
          LOSSYSTOP(v);
          leaving[v] = 1; leftByStop[v] = 1;
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
  byte i, pend, g;
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
       assert(lossy || !chainAtStart || actedBy != 0);
       delivering = 0; actedBy = 0; promotedMid = 0; chainAtStart = 0; i = 0;
       ev++
     }
  :: atomic { syncing == NONE && nsync < MAXSYNC && SET(CANSYNC) != 0 ->
       pend = SET(CANSYNC);
       pick(pend, i);
       pend = 0; nsync++;
       /* the runtime calls Synchronize: a free Syncer slot of i serves it */
       g = (!sreq[2*i] -> 2*i : 2*i + 1);
       sreq[g] = 1;
#ifdef BROKEN_UNFENCED_CLAIM
       /* no fence: in the chain at once; the claim runs whenever it runs, */
       /* events flowing meanwhile                                         */
       wantsync[i] = 0; inchain[i] = 1; g = 0; i = 0
#else
       syncing = i                    /* sync lock: no event in flight */
#endif
     }
#ifndef BROKEN_UNFENCED_CLAIM
     /* wait for the response to Synchronize, or for the plugin's drop */
     atomic { !sreq[g] || !wantsync[i] || !alive[i] ->
       if
       :: !sreq[g] && wantsync[i] && alive[i] -> inchain[i] = 1   /* appended */
       :: else
       fi;
       wantsync[i] = 0;
       syncing = NONE; g = 0; i = 0
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
#define OWNERS ((alive[0] && role[0] == OWNER && name == 0) + \
                (alive[1] && role[1] == OWNER && name == 1) + \
                (NI > 2 && alive[LAST] && role[LAST] == OWNER && name == LAST))
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
       run YieldServer(i); run Run(i); run Syncer(i, 0); run Syncer(i, 1);
       run WatchOwner(i); run WatchSuccessor(i);
       i++
    :: else -> break
    od
  }
}

/*
 * Promela model of the nri-handover protocol as implemented in
 *   handover/coordinator.go  (Claim, askToYield, becomeOwner, ensurePublished,
 *                             takeBackIfOrphaned, ownerAlive, demote, yield,
 *                             Enter, watchOwner, watchSuccessor,
 *                             watchUntilGone, promoteIfOrphaned, Leave, Close)
 *   handover/dir.go          (Lock = flock on <dir>/lock, publishOwner = link +
 *                             rename of owner.sock, statID used by Enter)
 *   plugin/adapter.go        (Synchronize calls Claim; every event handler
 *                             calls gate/Enter and acts only as owner)
 *   plugin/plugin.go         (Run: reconnect after a lost connection or a
 *                             resync request; leave on SIGTERM)
 * and of the NRI runtime facts it relies on (docs/design.md):
 *   - the runtime serializes events; each event goes to every connected
 *     plugin, one after the other, in an unspecified order (chosen anew,
 *     nondeterministically, for every event);
 *   - a plugin is synchronized under the runtime's sync lock: no event is in
 *     flight while its Synchronize runs; it is appended to the chain when
 *     Synchronize returns and then receives every later event;
 *   - a plugin that crashes, times out or whose connection breaks is dropped.
 *
 * Run:  make model   (handover/model/check.sh; docs/model.md explains it all)
 *
 * Bounds (the defaults; override with -D on the spin command line):
 *   NI       = 3  instances: 0 = the old owner, 1 = a newcomer, 2 = a second
 *                newcomer. Instance i started before instance i+1 (this is
 *                what the newest-instance policy compares); the runtime may
 *                synchronize them in any order, between any two events.
 *   NEV      = 3  events delivered by the runtime.
 *   MAXFAULT = 1  faults: a crash (SIGKILL), a drop by the runtime of a live
 *                instance (it timed out; it reconnects later), or a stop
 *                (SIGTERM: Leave, disconnect, Close), of any instance, at any
 *                step.
 * Timing is abstracted away: every bounded wait (claim lock, Yield answer,
 * Leave) may expire at any moment while it is waiting, and every delay
 * (a Yield request not yet served, a watcher not yet woken) can last
 * across any number of steps of the other processes.
 *
 * Variants (-D):
 *   BROKEN_UNFENCED_CLAIM  the newcomer is appended to the chain at once and
 *                          claims at an arbitrary moment, not inside its
 *                          Synchronize (no fence): spin must find a violation.
 *   BROKEN_NO_FENCING      Enter does not check the owner name: spin must
 *                          find a violation (forced takeover of a slow owner).
 *   STRICT_AT_MOST_ONCE    claim that no event is ever acted on twice, even
 *                          around a fault (does NOT hold: see docs/model.md).
 *   CHECK_RECOVERY         claim that after the run, if an instance is alive
 *                          and connected, some connected instance owns the
 *                          plugin (does NOT hold: see docs/model.md).
 *   CHECK_SYNC_ROLE        claim that the adapter calls the author's
 *                          Synchronize only as owner (does NOT hold: see
 *                          docs/model.md).
 */

#ifndef NI
#define NI 3
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

#define NONE 7          /* no instance */
#define bit(i) (1 << (i))

/* api.Role, and api.YieldResponse.Accepted */
mtype = { JOINING, OWNER, STANDBY, RETIRED, ACCEPT, REFUSE };

/* ---- state of each instance (Coordinator fields and process facts) ---- */
mtype role[NI] = JOINING; /* c.role                                     */
bool alive[NI];          /* the process runs (not crashed, not exited)   */
bool sock[NI];           /* its instances/<id>.sock answers              */
bool closed[NI];         /* c.closed (Coordinator.Close)                 */
bool leaving[NI];        /* c.leaving (Coordinator.Leave)                */
byte successor[NI];      /* c.successor                                  */
byte lastTo[NI];         /* c.lastHandover.ToId                          */
byte watching[NI];       /* standby i has a Watch open on this instance  */
                         /* (it is in that instance's c.watchers)        */

/* ---- runtime connection (plugin.Run, stub, runtime chain) ---- */
bool wantsync[NI];       /* connected, waiting for / in its Synchronize  */
bool inchain[NI];        /* synchronized: receives every event           */
bool dropped[NI];        /* dropped while alive: plugin.Run reconnects   */
bool resync[NI];         /* OnResync requested (p.resync channel)        */
bool sreq[2*NI];         /* a Synchronize call served by Syncer slot     */
bool woStart[NI];        /* go c.watchOwner() requested                  */
chan wsq[NI] = [2] of { byte };  /* go c.watchSuccessor(taker) requested */
byte syncing = NONE;     /* instance being synchronized (sync lock held) */
byte nsync = 0;          /* Synchronize calls so far (bounded: MAXSYNC)  */

/* ---- the handover directory ---- */
byte name = NONE;        /* owner.sock leads to this instance's socket   */
byte lock = NONE;        /* holder of the claim lock (flock)             */

/* ---- the side channel: Yield requests and their answers ---- */
chan yq[NI] = [3] of { byte, byte };  /* (taker, request id) per server  */
byte yseq[NI];           /* request id of the taker's last Yield         */
byte ywait[NI] = NONE;   /* server the taker waits on (NONE: not waiting)*/
bool yready[NI];         /* an answer arrived in time                    */
mtype ykind[NI];         /* ACCEPT or REFUSE                             */
byte yowner[NI];         /* resp.Owner                                   */

/* ---- faults ---- */
byte faults = 0;         /* faults injected so far                       */
bool lossy = 0;          /* a fault that may lose or repeat events:      */
                         /* crash, drop, or stop of a non-handed owner   */
bool forced = 0;         /* some claim took over without a Yield answer  */

/* ---- bookkeeping for the invariants ---- */
byte ev = 0;             /* events delivered so far                      */
bool delivering = 0;     /* an event is in flight                        */
byte actedBy = 0;        /* instances that acted on the event in flight  */
byte promotedMid = 0;    /* instances promoted outside a Synchronize     */
                         /* while the event in flight was being delivered */
bool gaveUp[NI];         /* yielded, retired, or the owner name moved away */
                         /* (cleared when it publishes itself again)      */

/* i is connected, waits for its Synchronize, and has a free Syncer slot */
#define CANSYNC(i) (wantsync[i] && alive[i] && (sreq[2*(i)] == 0 || sreq[2*(i)+1] == 0))

#define CHAINMASK ((inchain[0] -> 1 : 0) | (inchain[1] -> 2 : 0) | \
                   ((NI > 2 && inchain[NI-1]) -> bit(NI-1) : 0))

/* pick one instance of a non-empty bit set, nondeterministically */
inline pick(set, i) {
  if
  :: (set & 1) -> i = 0
  :: (set & 2) -> i = 1
#if NI > 2
  :: (set & 4) -> i = 2
#endif
  fi
}

/* ------------------------------------------------------------------ */
/* Acting on one event: gate -> Coordinator.Enter, then the author's   */
/* handler. The events lock is held from Enter to Exit, so nothing of  */
/* the same instance (yield, becomeOwner, demote, Leave) runs between  */
/* the check and the action: one atomic step.                          */
/* ------------------------------------------------------------------ */
inline act(i) {
  /* I1: an instance that yielded, retired or lost the owner name never
     acts again, unless it took ownership back (published itself). */
  assert(!gaveUp[i]);
  if
  :: actedBy != 0 ->
#ifdef STRICT_AT_MOST_ONCE
     assert(actedBy == 0);
#else
     /* I2: a second action on one event happens only when every earlier
        actor died or stopped after acting, within this very delivery, and
        this instance was promoted (unfenced) within this very delivery. */
     assert((promotedMid & bit(i)) != 0 &&
            ((actedBy & 1) == 0 || !sock[0]) &&
            ((actedBy & 2) == 0 || !sock[1]) &&
            (NI < 3 || (actedBy & bit(NI-1)) == 0 || !sock[NI-1]))
#endif
  :: else
  fi;
  actedBy = actedBy | bit(i)
}

inline deliver(i) {
  if
  :: inchain[i] && alive[i] ->
     /* plugin.gate -> Coordinator.Enter */
#ifndef BROKEN_NO_FENCING
     if
     :: role[i] == OWNER && name != i ->
        /* statID(owner.sock) != c.ownSocket: superseded, retire on the spot */
        role[i] = RETIRED
     :: else
     fi;
#endif
     if
     :: role[i] == OWNER -> act(i)        /* the author's handler runs */
     :: else                              /* plugin.skip */
     fi
  :: else                                 /* dead or dropped: not called */
  fi
}

/* ------------------------------------------------------------------ */
/* Coordinator.becomeOwner: Dir.publishOwner (link + rename: one atomic */
/* step), then under the events lock role = owner. Call with the lock.  */
/* Uses the caller's locals me, from, unfenced.                        */
/* ------------------------------------------------------------------ */
inline becomeOwner() {
  atomic { alive[me] ->
    /* Dir.publishOwner */
    if
    :: name != NONE && name != me && alive[name] && role[name] == OWNER ->
       forced = 1                         /* a live owner loses the name */
    :: else
    fi;
    if
    :: name != NONE && name != me -> gaveUp[name] = 1
    :: else
    fi;
    name = me;
    gaveUp[me] = 0
  }
  atomic { alive[me] ->
    /* c.events.Lock(); c.setLocked(ROLE_OWNER) */
    role[me] = OWNER;
    successor[me] = NONE;
    if
    :: from != NONE -> lastTo[me] = me    /* c.lastHandover: from -> self */
    :: else
    fi;
    if
    :: unfenced && delivering -> promotedMid = promotedMid | bit(me)
    :: else
    fi
  }
}

/* Coordinator.demote(STANDBY, reason, watch=true): Uses me, pid_ */
inline demoteStandby() {
  atomic { alive[me] ->
    if
    :: role[me] != STANDBY && !closed[me] ->
       if
       :: role[me] == OWNER || role[me] == RETIRED -> gaveUp[me] = 1
       :: else
       fi;
       role[me] = STANDBY;
       woStart[me] = 1                    /* go c.watchOwner() */
    :: else -> role[me] = STANDBY
    fi
  }
}

/* Coordinator.ownerAlive: result in oa (0 no, 1 yes). Uses me, h, s2, oa. */
inline ownerAlive() {
  atomic { alive[me] ->
    h = name;                             /* Dial(owner.sock) */
    oa = ((h == NONE || !sock[h]) -> 0 : 2)
  }
  if
  :: oa == 2 ->
     atomic { alive[me] ->                /* cl.Status */
       if
       :: !sock[h] -> oa = 1              /* Status failed: "slow", assume alive */
       :: sock[h] && h == me -> oa = 0    /* it is us */
       :: sock[h] && h != me && role[h] == OWNER -> oa = 1
       :: sock[h] && h != me && role[h] != OWNER ->
          s2 = lastTo[h]; oa = 3          /* a retired holder: its successor? */
       fi
     }
     if
     :: oa == 3 ->
        atomic { alive[me] ->             /* Dial(InstanceSocket(succ)) */
          oa = ((s2 != NONE && s2 != me && sock[s2]) -> 1 : 0)
        }
     :: else
     fi
  :: else
  fi
}

/* Coordinator.promoteIfOrphaned. Uses me, got, h, s2, oa, from, unfenced. */
inline promoteIfOrphaned() {
  /* Dir.Lock(ctx): the lock may stay busy until the deadline */
  if
  :: atomic { alive[me] && lock == NONE -> lock = me; got = 1 }
  :: atomic { alive[me] && lock != NONE -> got = 0 }   /* "claim lock busy" */
  fi;
  if
  :: got ->
     atomic { alive[me] -> oa = ((role[me] == OWNER || closed[me]) -> 1 : 0) }
     if
     :: oa == 0 -> ownerAlive()
     :: else
     fi;
     if
     :: oa == 0 ->
        from = NONE; unfenced = 1;
        becomeOwner()                     /* "promoted: ..." */
     :: else
     fi;
     atomic { if :: lock == me -> lock = NONE :: else fi }   /* unlock */
  :: else
  fi
}

/* ------------------------------------------------------------------ */
/* adapter.Synchronize -> Coordinator.Claim (in the runtime's sync     */
/* request, under the runtime's sync lock), then the author's          */
/* Synchronize if the claim returned owner.                            */
/* ------------------------------------------------------------------ */
#define D_NONE    0
#define D_ASK     1
#define D_BECOME  2
#define D_STANDBY 3
#define D_ENSURE  4
#define D_TAKEBACK 5
#define D_DONE    6

/* Two slots per instance: a new Synchronize (after the runtime dropped */
/* the instance) may start while the previous Claim is still running.   */
proctype Syncer(byte me; byte slot) {
  byte dec = D_NONE, h = NONE, s2 = NONE, o = NONE, from = NONE, oa = 0;
  bool tmo = 0, redirect = 1, okk = 0, unfenced = 0, retOwner = 0;
  mtype k = ACCEPT;
end:
  do
  :: atomic { sreq[2*me + slot] != 0 -> skip }

  /* Coordinator.claim: Dir.Lock with a quarter of the claim budget */
  if
  :: atomic { alive[me] && lock == NONE -> lock = me }
  :: atomic { alive[me] && lock != NONE -> skip } ->
     demoteStandby();                     /* "claim: ... another handover" */
     goto done
  fi;

  /* switch c.currentRole() */
  atomic { alive[me] ->
    if
    :: role[me] == OWNER -> dec = D_ENSURE
    :: role[me] == RETIRED -> dec = D_TAKEBACK
    :: else ->
       h = name;                          /* Dial(owner.sock) */
       dec = ((h == NONE || !sock[h]) -> D_BECOME : D_ASK)  /* ErrNoInstance: "no owner on the node" */
    fi
  }

  if
  :: dec == D_ENSURE ->
     /* Coordinator.ensurePublished */
     atomic { alive[me] -> h = name; okk = (h != NONE && sock[h]) }
     if
     :: !okk -> atomic { alive[me] -> name = me; gaveUp[me] = 0 }   /* publishOwner */
     :: okk && h == me -> skip
     :: okk && h != me ->
        atomic { alive[me] ->
          if
          :: !sock[h] -> skip             /* Status error: return err */
          :: sock[h] && role[h] == OWNER ->
             role[me] = RETIRED; gaveUp[me] = 1   /* demote(RETIRED, "superseded") */
          :: sock[h] && role[h] != OWNER ->
             if :: name != me && name != NONE -> gaveUp[name] = 1 :: else fi;
             name = me; gaveUp[me] = 0    /* publishOwner */
          fi
        }
     fi;
     retOwner = 1;                        /* claim returns ROLE_OWNER, nil */
     dec = D_DONE
  :: dec == D_TAKEBACK ->
     /* Coordinator.takeBackIfOrphaned */
     ownerAlive();
     dec = ((oa == 0) -> D_BECOME : D_DONE)   /* "successor gone; took ownership back" */
  :: dec == D_ASK ->
     /* Coordinator.askToYield(owner, redirect) */
ask: atomic { alive[me] ->
       yseq[me] = (yseq[me] + 1) % 4;
       ywait[me] = h; yready[me] = 0;
       if
       :: nfull(yq[h]) -> yq[h]!me,yseq[me]   /* owner.Yield(ctx, taker=me) */
       :: full(yq[h]) -> skip                  /* (never in practice) */
       fi
     }
     if
     :: atomic { alive[me] && yready[me] -> ywait[me] = NONE; k = ykind[me]; o = yowner[me]; tmo = 0 }
     :: atomic { alive[me] -> ywait[me] = NONE; tmo = 1 }  /* ctx deadline (half the budget) or error */
     fi;
     if
     :: tmo ->
        forced = 1;
        from = NONE; dec = D_BECOME       /* "owner unresponsive; took over" */
     :: !tmo && k == ACCEPT ->
        from = o; dec = D_BECOME          /* "took over from ..." */
     :: !tmo && k == REFUSE && o == me ->
        from = NONE; dec = D_BECOME       /* "owner name repaired" */
     :: !tmo && k == REFUSE && o != me && o != NONE && redirect ->
        atomic { alive[me] -> okk = sock[o] }  /* Dial(InstanceSocket(resp.Owner)) */
        if
        :: okk -> h = o; redirect = 0; goto ask   /* askToYield(next, false) */
        :: else -> from = NONE; dec = D_BECOME    /* "owner's successor is gone" */
        fi
     :: else -> dec = D_STANDBY           /* demote(STANDBY, resp.Reason) */
     fi
  :: else
  fi;

  if
  :: dec == D_BECOME -> unfenced = 0; becomeOwner(); retOwner = 1
  :: dec == D_STANDBY -> demoteStandby()
  :: else
  fi;
  atomic { if :: lock == me -> lock = NONE :: else fi }   /* defer unlock() */

done:
  /* adapter.Synchronize: role, err := Claim(); if role != owner return */
  atomic { alive[me] ->
#ifdef CHECK_SYNC_ROLE
    /* the author's Synchronize runs only if Claim returned owner: it must be */
    assert(!retOwner || (role[me] == OWNER && name == me));
#endif
    sreq[2*me + slot] = 0;                /* Synchronize returns */
    dec = D_NONE; h = NONE; s2 = NONE; o = NONE; from = NONE; oa = 0;
    tmo = 0; redirect = 1; okk = 0; unfenced = 0; retOwner = 0; k = ACCEPT
  }
  od
}

/* ------------------------------------------------------------------ */
/* Coordinator.yield, served on the instance's own socket. The request */
/* may wait here for any time (the instance is slow or hung): the      */
/* taker's deadline can expire first, and the answer is then lost.     */
/* ------------------------------------------------------------------ */
inline reply(t, sq, kk, oo) {
  if
  :: ywait[t] == me && yseq[t] == sq -> yready[t] = 1; ykind[t] = kk; yowner[t] = oo
  :: else                                 /* the taker gave up: answer lost */
  fi
}

proctype YieldServer(byte me) {
  byte t, sq;
end:
  do
  :: atomic { alive[me] && sock[me] && nempty(yq[me]) ->
       yq[me]?t,sq;
       /* c.events.Lock(); c.mu.Lock() */
       if
       :: role[me] != OWNER ->
          reply(t, sq, REFUSE, successor[me])   /* "not the owner" */
       :: role[me] == OWNER && !leaving[me] && t < me ->
          reply(t, sq, REFUSE, successor[me])   /* NewestInstance.Allow: taker is older */
       :: role[me] == OWNER && (leaving[me] || t > me) ->
          successor[me] = t; lastTo[me] = t;
          role[me] = RETIRED; gaveUp[me] = 1;   /* "yielded to ..." */
          if
          :: !closed[me] && nfull(wsq[me]) -> wsq[me]!t   /* go c.watchSuccessor(taker) */
          :: closed[me] || full(wsq[me]) -> skip
          fi;
          reply(t, sq, ACCEPT, me)
       fi
     }
  od
}

/* ------------------------------------------------------------------ */
/* Coordinator.watchSuccessor / watchUntilGone, on a retired instance. */
/* ------------------------------------------------------------------ */
proctype WatchSuccessor(byte me) {
  byte s = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0;
  bool got = 0, unfenced = 0;
end:
  do
  :: wsq[me]?s ->
     /* Dial(InstanceSocket(successor)) */
     if
     :: atomic { alive[me] && !sock[s] -> skip } -> goto promote
     :: atomic { alive[me] && sock[s] -> skip }
     fi;
     /* watchUntilGone: cl.Watch returns when s changes role or epoch, */
     /* leaves, or the connection breaks                               */
end_watch:
     if
     :: atomic { alive[me] && !sock[s] -> skip } -> goto promote   /* err: connection gone */
     :: atomic { alive[me] && sock[s] && role[s] == RETIRED && !leaving[s] && !closed[s] -> skip } ->
        goto next                         /* handed on in order */
     :: atomic { alive[me] && sock[s] && (leaving[s] || closed[s]) -> skip } ->
end_closed:
        atomic { (alive[me] && !sock[s]) || closed[me] -> skip };   /* <-cl.Closed() */
        goto promote
     :: atomic { closed[me] -> skip } -> goto next                   /* c.ctx done */
     fi;
promote:
     if
     :: atomic { alive[me] && closed[me] -> skip } -> goto next     /* c.ctx.Err() != nil */
     :: atomic { alive[me] && !closed[me] -> skip }
     fi;
     promoteIfOrphaned();                /* "successor ... gone" */
next:
     atomic { s = NONE; h = NONE; s2 = NONE; from = NONE; oa = 0; got = 0; unfenced = 0 }
  od
}

/* ------------------------------------------------------------------ */
/* Coordinator.watchOwner, on a standby (started by demote).           */
/* ------------------------------------------------------------------ */
proctype WatchOwner(byte me) {
  byte w = NONE, h = NONE, s2 = NONE, from = NONE, oa = 0;
  bool got = 0, unfenced = 0, okk = 0;
end:
  do
  :: atomic { woStart[me] -> woStart[me] = 0 }
     do   /* for c.currentRole() == ROLE_STANDBY */
     :: atomic { !(alive[me] && !closed[me] && role[me] == STANDBY) -> skip } -> break
     :: atomic { alive[me] && !closed[me] && role[me] == STANDBY ->
          w = name; okk = (w != NONE && sock[w]) }       /* Dial(owner.sock) */
        if
        :: !okk -> promoteIfOrphaned()                     /* ErrNoInstance: "owner gone" */
        :: okk ->
           /* cl.Status, then cl.Watch: w puts us in its c.watchers and   */
           /* answers when it leaves, stops owning or changes epoch; the  */
           /* call fails when the connection breaks                       */
           atomic { alive[me] -> watching[me] = w }
end_watch:
           if
           :: atomic { alive[me] && !sock[w] -> watching[me] = NONE } ->
              promoteIfOrphaned()                          /* "owner connection lost" */
           :: atomic { alive[me] && sock[w] && (role[w] != OWNER || leaving[w] || closed[w]) ->
                watching[me] = NONE;
                if
                :: role[me] == STANDBY -> resync[me] = 1  /* OnResync */
                :: else
                fi }
           :: atomic { alive[me] && closed[me] -> watching[me] = NONE }
           fi
        fi;
        atomic { w = NONE; h = NONE; s2 = NONE; from = NONE; oa = 0; got = 0; unfenced = 0; okk = 0 }
     od
  od
}

/* ------------------------------------------------------------------ */
/* plugin.Run: reconnect after the runtime dropped us, or disconnect   */
/* and reconnect on a resync request (to claim in a new Synchronize).  */
/* ------------------------------------------------------------------ */
proctype Run(byte me) {
end:
  do
  :: atomic { alive[me] && !closed[me] && resync[me] && syncing != me ->
       resync[me] = 0;
       inchain[me] = 0;                   /* p.disconnect(s) */
       wantsync[me] = 1                   /* p.connect: a new Synchronize */
     }
  :: atomic { alive[me] && !closed[me] && dropped[me] && !wantsync[me] && !inchain[me] && syncing != me ->
       dropped[me] = 0;
       wantsync[me] = 1                   /* reconnect after the retry delay */
     }
  od
}

/* some live standby has a Watch open on v (Leave's standbys) */
#define STANDBYS(v) ((alive[0] && watching[0] == v) || (alive[1] && watching[1] == v) || \
                     (NI > 2 && alive[NI-1] && watching[NI-1] == v))

/* ------------------------------------------------------------------ */
/* Faults: crash, drop by the runtime, stop (SIGTERM) of any instance. */
/* ------------------------------------------------------------------ */
active proctype Faults() {
  byte v, set;
  do
  :: faults < MAXFAULT && (alive[0] || alive[1] || (NI > 2 && alive[NI-1])) ->
     atomic {
       set = (alive[0] -> 1 : 0) | (alive[1] -> 2 : 0) | ((NI > 2 && alive[NI-1]) -> bit(NI-1) : 0);
       pick(set, v);
       faults++
     }
     if
     :: atomic {                          /* crash (SIGKILL) */
          alive[v] = 0; sock[v] = 0;      /* its socket no longer answers */
          inchain[v] = 0; wantsync[v] = 0;   /* the runtime drops it */
          lossy = 1;
          if :: lock == v -> lock = NONE :: else fi   /* the kernel drops its flock */
        }
#ifdef FAULT_DROP
     :: atomic {                          /* stalled past the runtime's request */
          inchain[v] = 0; wantsync[v] = 0; dropped[v] = 1;   /* timeout: dropped */
          lossy = 1
        }
#endif
     :: /* stop (SIGTERM): plugin.Run -> leave -> Coordinator.Leave */
        atomic {
          if
          :: role[v] == OWNER && STANDBYS(v) -> leaving[v] = 1   /* tell the standbys */
          :: else
          fi
        }
        if
        :: leaving[v] ->
           if
           :: atomic { role[v] != OWNER || !STANDBYS(v) -> skip }  /* handed over, or no standby left */
           :: skip                                /* ctx ends: "no standby took over in time" */
           fi
        :: else
        fi;
        atomic {                          /* c.events.Lock(): retire "stopped" */
          if :: role[v] == OWNER -> lossy = 1 :: else fi;   /* not handed over */
          leaving[v] = 1;
          if
          :: role[v] != RETIRED -> role[v] = RETIRED; gaveUp[v] = 1
          :: else
          fi
        }
        atomic { inchain[v] = 0; wantsync[v] = 0 }   /* p.disconnect(s) */
        atomic { closed[v] = 1; sock[v] = 0 }         /* Coordinator.Close: server closed */
        atomic {                          /* the process exits */
          alive[v] = 0;
          if :: lock == v -> lock = NONE :: else fi
        }
     fi
  :: break
  od
}

/* ------------------------------------------------------------------ */
/* The runtime: N serialized events, each delivered to every plugin in */
/* the chain in a nondeterministic order; Synchronize of a connecting  */
/* plugin under the sync lock, between two events.                     */
/* ------------------------------------------------------------------ */
active proctype Runtime() {
  byte i, pend, g;
  bool chainAtStart;
end:
  do
  :: atomic { ev < NEV && syncing == NONE ->   /* a CRI call: BlockPluginSync */
       delivering = 1; actedBy = 0; promotedMid = 0;
       pend = CHAINMASK; chainAtStart = (pend != 0)
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
       /* I3: with no fault so far, an event reaching a synchronized */
       /* instance is acted on (and, by I2, exactly once).            */
       assert(lossy || !chainAtStart || actedBy != 0);
       delivering = 0; ev++
     }
  :: atomic { syncing == NONE && nsync < MAXSYNC && (CANSYNC(0) || CANSYNC(1) || (NI > 2 && CANSYNC(NI-1))) ->
       pend = (CANSYNC(0) -> 1 : 0) | (CANSYNC(1) -> 2 : 0) |
              ((NI > 2 && CANSYNC(NI-1)) -> bit(NI-1) : 0);
       pick(pend, i);
       pend = 0; nsync++;
       /* the runtime calls Synchronize: a free Syncer slot of i serves it */
       if
       :: sreq[2*i] == 0 -> g = 2*i
       :: else -> g = 2*i + 1
       fi;
       sreq[g] = 1;
#ifdef BROKEN_UNFENCED_CLAIM
       /* no fence: the plugin is in the chain at once, and claims */
       /* whenever its goroutine gets there, events flowing meanwhile */
       wantsync[i] = 0; inchain[i] = 1
#else
       syncing = i                        /* sync lock: no event in flight */
#endif
     }
#ifndef BROKEN_UNFENCED_CLAIM
     /* wait for the Synchronize response, or the plugin's drop */
     atomic { sreq[g] == 0 || !wantsync[i] || !alive[i] ->
       if
       :: sreq[g] == 0 && wantsync[i] && alive[i] -> inchain[i] = 1   /* appended */
       :: else
       fi;
       wantsync[i] = 0;
       syncing = NONE; g = 0; i = 0
     }
#endif
  od
}

/* ---- invariants checked in every state ---- */
#define OWNERS ((alive[0] && role[0] == OWNER && name == 0) + \
                (alive[1] && role[1] == OWNER && name == 1) + \
                (NI > 2 && alive[NI-1] && role[NI-1] == OWNER && name == NI-1))
#define ROLEOWNERS ((alive[0] && role[0] == OWNER) + (alive[1] && role[1] == OWNER) + \
                    (NI > 2 && alive[NI-1] && role[NI-1] == OWNER))

active proctype Invariants() {
end:
  atomic {
    /* I4: at most one owner (role owner and the owner name leads to it); */
    /* and two live instances in the owner role only after some claim     */
    /* took over without the owner's answer (the stale one is fenced out  */
    /* at its next event, I1) or after a drop/crash/stop.                 */
    !(OWNERS <= 1 && (ROLEOWNERS <= 1 || forced || lossy)) ->
    assert(OWNERS <= 1 && (ROLEOWNERS <= 1 || forced || lossy))
  }
}

/* after the run, when nothing can move any more */
#define CONNOWNER ((inchain[0] && role[0] == OWNER && name == 0) || \
                   (inchain[1] && role[1] == OWNER && name == 1) || \
                   (NI > 2 && inchain[NI-1] && role[NI-1] == OWNER && name == NI-1))
active proctype Final() {
  timeout ->
  /* the protocol never blocks the runtime: every event was delivered */
  assert(ev == NEV);
#ifdef CHECK_RECOVERY
  /* if an instance is alive and synchronized, a synchronized instance */
  /* owns the plugin (ownership was recovered after the fault)         */
  assert(CHAINMASK == 0 || CONNOWNER)
#endif
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NI ->
       /* plugin.New -> handover.New: serves its own socket; then Run */
       /* connects to the runtime and waits for its Synchronize.       */
       alive[i] = 1; sock[i] = 1; wantsync[i] = 1;
       successor[i] = NONE; lastTo[i] = NONE; ywait[i] = NONE; watching[i] = NONE;
       run YieldServer(i); run Run(i); run Syncer(i, 0); run Syncer(i, 1);
       run WatchOwner(i); run WatchSuccessor(i);
       i++
    :: else -> break
    od
  }
}

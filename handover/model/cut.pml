/*
 * Promela model of the per-event cut (the owner.gen register algorithm of
 * /work/notes/cut.md, "The per-event cut", 2026-12-01 22:45), separate from
 * handover.pml (which models the claim/yield protocol before the cut).
 *
 * What is modelled:
 *   - the runtime: a serialized stream of NEV events; every event has a key
 *     chosen nondeterministically among 1..NKEY (so every stream of NEV keys
 *     is explored, with every run of repeated keys); the connections of the
 *     chain (appended, not closed) at the event's start are called one after
 *     the other, in a nondeterministic order chosen anew for every event; a
 *     connection closed before its turn is skipped;
 *   - connection 0: the owner of the register at the start, in the chain;
 *   - connection 1: a newcomer: its Synchronize claims (heir = its tag), then
 *     returns; the runtime appends it to the chain some time later, only
 *     when no event is in progress (it takes the runtime's lock), with any
 *     number of events in between (the CRI-O / exit-stop gap); with
 *     FAIL1 its Synchronize may also fail after the claim (never appended,
 *     clears heir if it is still its tag);
 *   - connection 2 (with N2): a second newcomer (a re-connection, a
 *     restarted new pod, ...) that claims at any time and whose Synchronize
 *     fails (N2FAIL=1, default) or may fail or succeed (N2FAIL=2);
 *     with REPLACE instead (RULES, STANDBY): R, the replacement of the
 *     standby's connection 3 by its own instance (see proctype Replace);
 *   - the idle rule: the heir promotes itself after the quiet interval Q if
 *     nothing was written by an event since (as designed: the events
 *     counter has not changed since its claim; FIX_QUIET_BIT: the quiet bit
 *     is still set), the recorded event is done (or not acted), and its
 *     connection is up. NO_IDLE leaves it out. Timing assumptions (the only
 *     place time matters; each flag drops one, see docs/model.md):
 *       T1  Q expires only after the runtime appended the heir (the append
 *           follows Synchronize by less than Q): IDLE_EARLY drops it;
 *       T2  Q never passes between two calls of one event (the calls of one
 *           event to the connections of one plugin take less than Q): the
 *           idle rule's first read is not in the middle of an event's
 *           calls: NO_T2 drops it;
 *   - CLOSE: connection 0 closes at any moment it is neither owner nor heir
 *     and no request to it is in flight (skipped thereafter);
 *     LEAVE_TIMEOUT: connection 0 (the old instance, stopping once a
 *     newcomer is in the chain) may also close while still owner, when its
 *     leave timeout expires.
 *
 * The register word (owner 16 | heir 16 | key 24 | ownerSeen | heirSeen |
 * acted | done [| quiet]) is changed only by CAS: every CAS is one atomic
 * step that reads the word and writes the new value (a failed CAS and its
 * retry is a later atomic step). Steps that read something beside the word
 * (the events counter) are separate steps. Tags: connection c has tag c+1
 * (0 = none).
 *
 * Checked (assertions, in every interleaving): every event is acted on by
 * exactly one connection: at most one (when a connection acts) and at least
 * one (when the event ends). CHECK_HEIR: at the end, if newcomer 1
 * succeeded and newcomer 2 failed, newcomer 1 is owner or heir.
 *
 * Fix flags (the fixes proposed in docs/model.md, "The per-event cut"; the
 * must-hold runs use the first three):
 *   FIX_QUIET_BIT          the idle rule's events counter replaced by a
 *                          quiet bit in the word: set by the claim (and by
 *                          the idle rule's re-arm), cleared by every write
 *                          of an event call; the idle CAS needs it set
 *   FIX_CLAIM_CLEARS_SEEN  the claim clears heirSeen with heir (a seen bit
 *                          of a previous heir must not vouch for the new one)
 *   FIX_FAIL_RESTORES      a claim remembers the heir it replaces; a failed
 *                          newcomer restores it (instead of clearing heir),
 *                          heirSeen and the quiet bit clear
 *   FIX_IDLE_REARM         the idle rule measures the quiet interval from
 *                          the counter's last change, not from the claim
 *                          (not enough: still the ABA of cut-x1)
 * Takeovers (RULES: rules 3-5 of decide in internal/protocol/cut.go, as
 * the code has them; docs/model.md "Takeovers: rules 3, 4 and 5"): decide
 * is modelled exactly, as a CAS loop: one step loads the word (and, for a
 * connection that neither owns nor inherits it, the events counter and
 * the owner mask, which only calls write), the next CASes and, if the CAS
 * landed, counts (newEvent); a failed CAS (a concurrent claim, idle rule,
 * release or late finish) loads again. Connection 3 (STANDBY) is a
 * live standby's connection in the chain from the start; mayTakeOver
 * holds for it, for the old owner until it leaves (NO_MT0: never) and
 * for a newcomer once its Synchronize returned. Faults (at most MAXF):
 *   ABANDON  the runtime gives up on the acting connection inside its
 *            handler and drops it; the handler finishes later (Late) or
 *            never (NO_LATE);
 *   DROP     the runtime drops the owner's connection between events;
 *   DROP_MID the runtime drops the owner's connection between two calls
 *            of an event, before its own (NO_HANDED: without the old
 *            owner's sighting of its handover, the code before, cut-x29);
 *   RELEASE  connection 0 leaves (releaseCut, left, disconnect), GONE adds
 *            the heir's PromoteWhenIdle "predecessor gone" takeover
 *            (takeCutLocked outright: it keeps the heir's seen bit as
 *            ownerSeen and, unseen after a release, marks the register
 *            in doubt, which rule 1 declares, C9, 0384538; NO_GONE_SEEN,
 *            broken: ownerSeen 0, as before).
 *            Once its release succeeded, connection 0 is a releaser
 *            (caller.releaser, commit bb7709f) until it disconnects:
 *            rule 5 applies to it as if it may take over, and after it
 *            acts, Coordinator.Finish releases again (a step of its own
 *            after done). NO_RELEASER (broken): as before bb7709f.
 *            DISC_BETWEEN: it disconnects only between events;
 *            CHECK_RELEASER: then, once released, no event is declared
 *            skipped. Vacuity: REACH_RELEASER (a releaser's take, must be
 *            caught), REACH_RELEASER_OVERRUN (a releaser's take whose
 *            Overrun Decide does not report: holds, unreachable here).
 * Checked: every event acted on at most once (twice only with ALO, when
 * declared in doubt); at the end (after NPROBE probe events with keys of
 * their own, which give a late declaration its chance), every checked
 * event acted on or declared (decl: the ghost record of what rules 3-5
 * and the heir's release case declare, by event); with ALO every event
 * declared in doubt is acted on; CHECK_PROMPT: no event left to rule 4;
 * the events counter equals the number of new events recorded (each
 * counted once).
 * C6 (0384538; the mark in the word since cut-x20, at every call since
 * cut-x22): an heir whose call skips by rule 1 an event with the recorded
 * key, acted on, marks the word (heirUnseen, WU; ghost Wuev: that event); every
 * record of a new event writes a word without it, and it is cleared with
 * the heir (claim, failed claim, promotion, gone take). If the heir's
 * next call is rule 2 as heir with the mark set and an owner (not
 * released), that event is declared in doubt (heirUnseen; with the
 * runtime calling the heir before the owner this may be a false alarm,
 * never a miss). The idle rule holds off while the mark is set and an
 * owner holds the word, or (the hold's bound) promotes declaring it.
 * NO_HEIR_UNSEEN (broken): no mark, as before 0384538; NO_IDLE_UNSEEN
 * (broken): the idle rule ignores it, as before cut-x20's fix;
 * MARK_FIRST_ONLY (broken): only the heir's first call marks, as before
 * cut-x22's fix.
 * Proposed fixes and assumptions of the must-hold runs: FIX_MASK,
 * FIX_R5 (in the code since), WINDOW (rule 4's declaration covers the
 * events since the owner's last recorded one), NOREPEAT (no event with
 * the key of the one before it), FAULT_NO_GAP (no fault while the
 * newcomer is between Synchronize and append), INORDER (the runtime calls
 * the chain in its order: A, S, then the newcomers).
 * Broken: NO_RULE3, NO_RULE4, NO_RULE5, NO_HEIR_UNSEEN, NO_GONE_SEEN,
 * NO_IDLE_UNSEEN, MARK_FIRST_ONLY, COUNT_EACH_TRY (the events counter
 * counted before every CAS, a failed one too, as before the fix of
 * cut-x21).
 *
 * NEWEST (RULES only; containerd/nri PR 281, work in progress): the
 * runtime calls, for each event, only the newest connection in the chain
 * that is not closed (the order of the appends: A, then S before A or,
 * with SNEWER, after it, then the newcomers as appended); the older ones
 * are shadowed, and the newest of them is called again, without any
 * notice, once every newer one has closed. Findings C10 (cut-x24) and C11
 * (cut-x25) in docs/model.md. NO_MISS_CHECK: at the end, only "at most
 * once" is checked (not "acted on or declared").
 *
 * CPTAKE (RULES only): the control plane's becomeOwner outside a
 * Synchronize takes the register outright (takeCutLocked(false)) at any
 * moment, for A, N1 or S (CPMASK), at most MAXCP times; the heir's gone
 * path (GONE) is the same swap (inline outright). Broken: NO_CP_UNSEEN,
 * NO_CP_HEIR_GAP, NO_CP_RULE5, NO_CP_GAP (docs/model.md "The control
 * plane under the cut", cut-x26..x28).
 *
 * Variants (implementation choices, each should be checked):
 *   IDLE_COUNTER_FIRST     the idle rule reads the counter before the word
 *                          (default: the word, then the counter, then CAS)
 *   IDLE_OS0               the idle promotion leaves ownerSeen 0 (default:
 *                          the same promote as in an event: ownerSeen 1)
 */

#ifndef NEV
#define NEV 4
#endif
#ifndef NKEY
#define NKEY 2
#endif
#ifndef N2FAIL
#define N2FAIL 1
#endif
#ifdef RULES
#define NC 4           /* connection 3: a standby (STANDBY) */
#else
#define NC 3
#endif
#define NONE 255
#ifndef NPROBE
#ifdef RULES
#define NPROBE 2
#else
#define NPROBE 0
#endif
#endif
#ifdef NO_N1
#define HAVE_N1 0
#else
#define HAVE_N1 1
#endif

#define NEVT (NEV + NPROBE)   /* the checked events, then the probes */
#ifndef MAXF
#define MAXF 1
#endif
/* a fault may be injected; FAULT_NO_GAP: only once no newcomer is between
 * its Synchronize and its append (docs/model.md C7) */
#ifdef FAULT_NO_GAP
#define FAULTOK (faults < MAXF && (!HAVE_N1 || inchain[1] || failed[1]))
#else
#define FAULTOK (faults < MAXF)
#endif
#ifdef ALO
#define ALOV 1
#else
#define ALOV 0
#endif

/* the register (owner.gen) */
byte Wowner = 1;
byte Wheir = 0;
byte Wkey = 0;
bit WoS = 0;
bit WhS = 0;
bit Wacted = 0;
bit Wdone = 0;
bit WQ = 0;        /* FIX_QUIET_BIT: the heir's quiet mark, cleared by every write of an event */
/* heirUnseen (C6, RULES): the heir's first call was rule 1's ambiguous
 * skip and no new event was recorded since; cleared with the heir and by
 * every record of a new event */
bit WU = 0;
/* FIX_STANDBY_MARK (C10, cut-x24; the default with RULES, as the code
 * has it: cutWord.unrecorded; NO_STANDBY_MARK: the code before): a connection that
 * may take over, neither owner nor heir, called for an event the register
 * does not record while an owner holds it, marks the word (bit 63); every
 * record of a new event clears it; a connection that takes the register
 * over from another with it set declares the events since the marked one
 * (ghost Wmev) in doubt (not a releaser's take), and the idle rule
 * holds off while it is set */
bit WM = 0;
#if defined(RULES) && !defined(NO_STANDBY_MARK)
#define FIX_STANDBY_MARK
#endif
/* beside it: the events counter */
byte evcount = 0;

/* runtime side */
bit inchain[NC];
bit closed[NC];
bit inEvent = 0;
byte calling = NONE;
bit midspan = 0;       /* T2: some of the event's connections were called, others are pending */   /* the connection a request is in flight to */
byte acts[NEVT];       /* how many connections acted on event e */

bit WiD = 0;       /* inDoubt (RULES; constant 0 otherwise) */
#ifdef RULES
/* rules 3-5 (cut.go decide): the register's inDoubt bit, the owner mask's
 * tag (ownerMaskCut: the connection whose events it records; every
 * connection subscribes to every event here), each connection's sighting
 * (valid, first, owner, events counter; ghost: the event it was taken at),
 * mayTakeOver (the newest connection of a live instance that is not
 * leaving), and the ghost bookkeeping of the invariant: Wev (the event
 * whose key the word records, plus 1; 0: none), decl[e] (1: declared in
 * doubt, 2: declared skipped), the faults injected and the declarations
 * made. */
byte maskTag = 1;
byte Wev = 0;
bit sgv[NC];
bit sfirst[NC];
bit shand[NC];   /* sighting.handed: the event was handed over (rule 2) to an owner not yet called for it */
byte sown[NC];
byte skey[NC];   /* sighting.key */
byte scnt[NC];
byte sev[NC];
/* a control-plane take's own standby mark, decided at the taker's next
 * call (Coordinator.markPending): the event plus 1 (0: none), its key, the
 * events counter at the take */
byte pm[NC];
byte pmk[NC];
byte pmcnt[NC];
bit mt[NC];
/* C6: the ghost event whose call set WU; MARK_FIRST_ONLY (broken, the
 * code before cut-x22's fix): caller.called (decide ran for the
 * connection before), only an heir's first call marks */
byte Wuev = 0;
byte Wmev = 0;
byte evnow = 0;   /* ghost: the events ended so far */
#define DECLARE_MARK(jj, upto) jj = Wmev; do :: jj < upto -> decl[jj] = decl[jj] | 2; jj++ :: else -> break od; ndecl++; jj = 0
#ifdef MARK_FIRST_ONLY
bit called[NC];
#define CALLED(c) called[c] = 1
#define MARKS(c) !called[c]
#else
#define CALLED(c) skip
#define MARKS(c) 1
#endif
/* ghost: the new events recorded (CASes of rules 2-5 that landed): the
 * events counter must equal it (cut-x21) */
byte nrec = 0;
byte decl[NEVT];
/* ghost: the events the harness hands its author late, once, as reached by
 * no handler (Config.OnUnacted, plugin/late.go): rule 4's skipped event, the
 * event handed over to an owner the runtime dropped before its call, and
 * the recorded event an owner, called for a new one, finds acted on by
 * nobody (Decision.recordedUnacted). Each must be acted on by no
 * connection (checked at the end) */
bit late[NEVT];
byte faults = 0;
byte ndecl = 0;
byte nrel = 0;
bit claimed[NC];
byte lateC = NONE;     /* ABANDON: the connection abandoned inside its handler */
/* RELEASE: connection 0 released the register (Coordinator.releasedTag):
 * from then on it is called as a releaser (caller.releaser) until it
 * disconnects; NO_RELEASER (broken): as before commit bb7709f, it is not */
bit rel0 = 0;
#ifdef NO_RELEASER
#define RELEASER 0
#else
#define RELEASER 1
#endif
#define RLS(c) (c == 0 && rel0 && RELEASER)
byte lateK = 0;
#ifdef NEWEST
/* the order of the appends (NEWEST): A 1, S 0 (older than A) or, with
 * SNEWER, 2; the newcomers from 3 on, as appended */
byte seq[NC];
byte nseq = 3;
#endif
#endif

/* connection side */
bit synced[NC];        /* its Synchronize returned successfully */
bit failed[NC];        /* its Synchronize failed (never appended) */
byte base[NC];         /* the counter when it claimed */
byte prevHeir[NC];     /* FIX_FAIL_RESTORES: the heir its claim replaced */
bit appended = 0;
bit finished = 0;      /* the runtime delivered every event */      /* some newcomer is in the chain (LEAVE_TIMEOUT) */

#define tag(c) (c + 1)

/* promote connection X (the heir) to owner */
#define PROMOTE(X) Wowner = X; Wheir = 0; WoS = 1; WhS = 0; WU = 0; WM = 0

#ifdef RULES
/* The register word as one value (for the CAS's compare). */
#define WORD (Wowner | (Wheir << 3) | (Wkey << 6) | (WoS << 9) | (WhS << 10) | (Wacted << 11) | (Wdone << 12) | (WiD << 13) | (WQ << 14) | (WU << 15) | (WM << 16))
/* cutWord.overran: the acting connection is inside its handler */
#define OVERRAN (Wowner != 0 && Wacted && !Wdone && !WiD && RULE3)
/* broken variants: a rule left out */
#ifdef NO_RULE3
#define RULE3 0
#else
#define RULE3 1
#endif
#ifdef NO_RULE4
#define RULE4 0
#else
#define RULE4 1
#endif
#ifdef NO_RULE5
#define RULE5 0
#else
#define RULE5 1
#endif
/* Dir.skipped: the owner mask names the owner (and it subscribes to the
 * kind: every connection subscribes to everything here); FIX_MASK: a mask
 * of another connection counts as "subscribes" (proposed) */
#ifdef FIX_MASK
#define MASKOK 1
#else
#define MASKOK (maskTag == Wowner)
#endif
/* what decide does, chosen from the word it loaded */
#define P_SKIP 0   /* neither owner nor heir, no takeover: a sighting, no write */
#define P_R5 1     /* rule 5: released register, taken */
#define P_R4 2     /* rule 4: the owner was skipped, taken */
#define P_R3D 3    /* rule 3: overrun, this event in doubt */
#define P_R3N 4    /* rule 3: overrun, the recorded event in doubt, this one new */
#define P_C1 5     /* rule 1 */
#define P_C2 6     /* rule 2 */
#define P_R5D 7    /* FIX_R5_KEY: rule 5, this event in doubt */
/* FIX_R5 (proposed): rule 5 also declares the event of its sighting if
 * it was first for it and nobody recorded an event since (the owner
 * released after this connection's call and before its own) */
#define R5QUIET (sgv[c] && ev0 == scnt[c])
#ifdef FIX_R5
#define R5SKIPPED (R5QUIET && sfirst[c] && sown[c] != 0 && !(shand[c] && Wacted))
#else
#define R5SKIPPED 0
#endif
/* Dir.skipped: the owner is the one of the sighting; FIX_SKIP_ANY_OWNER
 * (proposed): any owner (the counter alone says nobody recorded the event) */
#ifdef FIX_SKIP_ANY_OWNER
#define SAMEOWNER 1
#else
#define SAMEOWNER (Wowner == sown[c])
#endif
/* cutWord.handedUnseen: the word records key k handed over (rule 2) to an
 * owner that has not been called for it. NO_HANDED_SEEN (broken, the code
 * before): a standby's sighting does not note it, and rule 4 does not
 * read a handover from the events counter (skipped's second case) */
#ifdef NO_HANDED_SEEN
#define HANDEDUNSEEN(kk) 0
#define R4AFTERHANDOVER 0
#else
#define HANDEDUNSEEN(kk) (Wkey == kk && Wowner != 0 && Wheir == 0 && !Wacted && !WoS && !WiD)
/* Dir.skipped's second case: the one event recorded since the sighting
 * is its own event handed over to another owner, not called for it */
#define R4AFTERHANDOVER (sgv[c] && sfirst[c] && !shand[c] && sown[c] != 0 && Wowner != 0 && Wowner != sown[c] && evcount == scnt[c] + 1 && k != Wkey && HANDEDUNSEEN(skey[c]))
#endif
/* a new word for X alone, acting on this event (rules 3-5) */
#define FRESH(X) Wowner = X; Wheir = 0; WoS = 1; WhS = 0; Wacted = 1; Wdone = 0; WiD = 0

/* rule 4's declaration: the event of the previous sighting (WINDOW: every
 * event since the one the word records, up to it: what the takeover's
 * catch-up covers; see docs/model.md) */
#ifdef WINDOW
#define DECLARE_SKIPPED(c) j = Wev; do :: j <= sev[c] -> decl[j] = decl[j] | 2; j++ :: else -> break od; j = 0
#else
#define DECLARE_SKIPPED(c) decl[sev[c]] = decl[sev[c]] | 2
#endif
/* the event of the sighting: after its own handover (shand), the handed
 * event itself, which the word records (Decision.skippedHanded) */
#define DECLARE_SIGHTED(c) if :: shand[c] || r4h -> decl[sev[c]] = decl[sev[c]] | 2 :: else -> DECLARE_SKIPPED(c) fi

/* One request of the runtime to connection c for event e with key k: Dir.decide
 * (cut.go) exactly, then the handler and Dir.finish. */
inline call(c, e, k) {
	if
	:: closed[c] -> calling = NONE
	:: else ->
#if defined(REPLACE) && !defined(NO_MT_AT_CALL)
		/* REPLACE (C12): the right to take over moves from S to its
		 * replacement R at the runtime's first call of R
		 * (Coordinator.takerLocked, read under the lock Decide holds
		 * around decide) */
		atomic {
			if
			:: c == 2 && !mt[2] -> mt[2] = 1; mt[3] = 0; printf("MSC: e%d: R called, it may take over, S not\n", e)
			:: else
			fi
		}
#endif
		do
		:: atomic {
			/* the load of the word; for a connection that neither owns nor
			 * inherits it, also the events counter and the owner mask
			 * (only calls write them, and calls are serialized: nothing
			 * can write them between these loads) */
			midspan = 1;
			/* caller.releaser, as Coordinator.Decide computes it before
			 * decide (the CAS loop's retries keep it) */
#ifdef RELEASE
			if
			:: rls == 2 -> rls = RLS(c)
			:: else
			fi;
#endif
			snap = WORD;
			ev0 = evcount;
			r4h = 0;
			isO = (Wowner == tag(c));
			isH = (Wheir == tag(c));
			if
			:: !isO && !isH ->
				if
#ifdef FIX_R5
				/* proposed: unless nobody recorded an event since this
				 * connection's previous call (then the recorded event is
				 * older than this one), the recorded event may be this one
				 * (the leaver acted on it, then released, within this
				 * event): in doubt */
				:: (mt[c] || rls) && Wowner == 0 && Wheir == 0 && RULE5 && !R5QUIET && Wkey == k && Wacted -> plan = P_R5D
				:: (mt[c] || rls) && Wowner == 0 && Wheir == 0 && RULE5 && (R5QUIET || !(Wkey == k && Wacted)) -> plan = P_R5
#else
				:: (mt[c] || rls) && Wowner == 0 && Wheir == 0 && RULE5 -> plan = P_R5
#endif
				:: else ->
					if
					:: mt[c] && sgv[c] && sfirst[c] && Wowner != 0 && SAMEOWNER && evcount == scnt[c] && MASKOK && RULE4 && !(shand[c] && (WoS || Wacted)) -> plan = P_R4
					:: mt[c] && R4AFTERHANDOVER && MASKOK && RULE4 && !(Wowner == sown[c] && evcount == scnt[c]) -> plan = P_R4; r4h = 1
					:: else ->
						if
						:: mt[c] && OVERRAN && Wkey == k -> plan = P_R3D
						:: mt[c] && OVERRAN && Wkey != k -> plan = P_R3N
						:: else -> plan = P_SKIP
						fi
					fi
				fi
			:: else ->
				seen = (isO && WoS) || (isH && WhS);
				if
				:: !isO && OVERRAN && Wkey == k && !seen -> plan = P_R3D
				:: !isO && OVERRAN && !(Wkey == k && !seen) -> plan = P_R3N
				:: !(!isO && OVERRAN) && Wkey == k && !seen -> plan = P_C1
				:: !(!isO && OVERRAN) && !(Wkey == k && !seen) -> plan = P_C2
				fi
			fi;
			if
			:: plan == P_SKIP ->
				/* no write; what it saw, for its next call */
#ifdef FIX_STANDBY_MARK
				if
				:: mt[c] && !rls && Wkey != k && Wowner != 0 && !WM -> WM = 1; Wmev = e
				:: else
				fi;
#endif
				sgv[c] = 1; sfirst[c] = (Wkey != k) || HANDEDUNSEEN(k); shand[c] = HANDEDUNSEEN(k); sown[c] = Wowner; skey[c] = k; scnt[c] = evcount; sev[c] = e; CALLED(c);
				pm[c] = 0; /* not owner: the register moved, the take's declaration stands */
				printf("MSC: e%d k%d conn %d skips; sighting first=%d owner=%d events=%d\n", e, k, c, sfirst[c], sown[c], scnt[c]);
				break
			:: else
			fi
		   }
		   /* the CAS, then the counter (newEvent), counted once for the
		    * CAS that landed (cut.go, since cut-x21; only calls read or
		    * write the counter, and calls are serialized: nothing can come
		    * between the two). COUNT_EACH_TRY (broken, the code before):
		    * counted before every CAS, a failed one too */
		   atomic {
#ifdef COUNT_EACH_TRY
			if
			:: plan == P_R5 || plan == P_R4 || plan == P_R3N || plan == P_C2 || plan == P_R5D -> evcount++
			:: else
			fi;
#endif
			if
			:: WORD != snap -> printf("MSC: e%d conn %d: CAS failed\n", e, c)   /* load again */
			:: else ->
				/* a pending mark of its take: owner still, nothing
				 * recorded since, and a new key: handed late */
				if
				:: pm[c] != 0 && isO && ev0 == pmcnt[c] && k != pmk[c] -> late[pm[c] - 1] = 1;
#ifdef REACH_LATE_MARK
					assert(0);
#endif
					skip
				:: else
				fi;
				pm[c] = 0;
				wmd = WM && Wowner != tag(c);
				if
				:: plan == P_R5 || plan == P_R4 || plan == P_R3N || plan == P_C2 || plan == P_R5D ->
					nrec++;
#ifndef COUNT_EACH_TRY
					evcount++
#else
					skip
#endif
				:: else
				fi;
				if
				:: plan == P_R5 || plan == P_R4 || plan == P_R3N ->
					if
					:: plan == P_R4 ->
#ifdef REACH_R4H
						/* a vacuity check: rule 4 after a handover the
						 * taker reads from the counter (R4AFTERHANDOVER) */
						assert(!r4h);
#endif
						DECLARE_SIGHTED(c); ndecl++;
						/* handed late unless it has this event's key
						 * (tookOverFromOverrun) */
						if
						:: skey[c] != k -> late[sev[c]] = 1
						:: else
						fi;
						/* Decision.handedUnacted: the recorded event, handed
						 * over and acted on by nobody, declared too (and
						 * handed late: the model does not know whether this
						 * connection was called for it; the check covers
						 * both) */
#ifndef NO_HANDED
						if
						:: !shand[c] && !r4h && !Wacted && !WiD && Wev > 0 ->
							decl[Wev - 1] = decl[Wev - 1] | 2;
							if
							:: Wkey != k -> late[Wev - 1] = 1
							:: else
							fi
						:: else
						fi
#else
						skip
#endif
					:: plan == P_R3N -> decl[Wev - 1] = decl[Wev - 1] | 1; ndecl++
					/* Coordinator.Decide: for a releaser's take, the
					 * releaser case comes first (no tookOverFromOverrun):
					 * its Overrun is not reported */
					:: plan == P_R5 && R5SKIPPED && !rls -> DECLARE_SIGHTED(c); ndecl++
					:: plan == P_R5 && !(R5SKIPPED && !rls)
					fi;
					FRESH(tag(c)); Wkey = k; Wev = e + 1; act = 1
#ifdef REACH_RELEASER
					/* a vacuity check: the releaser takes an event */
					assert(!rls);
#endif
#ifdef REACH_RELEASER_OVERRUN
					/* the releaser takes with an Overrun it does not report */
					assert(!(rls && plan == P_R5 && R5SKIPPED));
#endif
				:: plan == P_R3D || plan == P_R5D ->
					Wowner = tag(c); Wheir = 0; WoS = 1; WhS = 0; WiD = 1;
					act = ALOV; Wdone = !act;
					decl[e] = decl[e] | 1; ndecl++
				:: plan == P_C1 ->
					if
					:: isO -> WoS = 1
					:: else -> WhS = 1
					fi;
					if
					:: isH && Wacted && Wowner == 0 ->
						/* an heir after a release, with the recorded key */
						Wowner = tag(c); Wheir = 0; WoS = 1; WhS = 0; WiD = 1;
						act = ALOV; Wdone = !act;
						decl[e] = decl[e] | 1; ndecl++
					:: !(isH && Wacted && Wowner == 0) && !Wacted ->
						if
						:: isH -> Wowner = tag(c); Wheir = 0; WoS = 1; WhS = 0
						:: else
						fi;
						Wacted = 1; Wdone = 0; act = 1
					:: !(isH && Wacted && Wowner == 0) && Wacted && isO && WiD ->
						/* InDoubt for the owner: the adapter acts with
						 * at-least-once; done: the mark of an outright take
						 * after a release (C9, unseenMark), counted here */
						act = ALOV; decl[e] = decl[e] | 1;
						if
						:: Wdone -> ndecl++
						:: else
						fi
					:: !(isH && Wacted && Wowner == 0) && Wacted && !(isO && WiD) ->
#ifndef NO_HEIR_UNSEEN
						/* C6: the ambiguous skip of an heir (at any of its
						 * calls, cut-x22): marked in the word (heirUnseen) */
						if
						:: isH && MARKS(c) -> WU = 1; Wuev = e
						:: else
						fi
#else
						skip
#endif
					fi
				:: plan == P_C2 ->
					if
					:: isH ->
#ifndef NO_HEIR_UNSEEN
						/* C6: its first call was the ambiguous skip of rule 1,
						 * nothing recorded since (the mark is in the word) and
						 * the owner did not release: that event is declared
						 * (Overrun, heirUnseen) */
						if
						:: WU && Wowner != 0 ->
							decl[Wuev] = decl[Wuev] | 1; ndecl++;
							printf("MSC: e%d conn %d: heir unseen at e%d, declared\n", e, c, Wuev)
						:: else
						fi;
#endif
						Wowner = tag(c); Wheir = 0; WoS = 1; Wacted = 1; act = 1
					:: !isH && isO && Wheir != 0 && WhS && Wkey != k ->
						/* hand over; the new owner acts when called */
						Wowner = Wheir; Wheir = 0; WoS = 0; Wacted = 0; hov = 1
					:: !isH && !(isO && Wheir != 0 && WhS && Wkey != k) ->
						/* the owner, called for a new event, finds the
						 * recorded one acted on by nobody, itself not
						 * called for it (left to it by a handover or a
						 * take): handed late (Decision.recordedUnacted) */
						if
						:: isO && !Wacted && !WoS && !WiD && Wev > 0 -> late[Wev - 1] = 1;
#ifdef REACH_LATE_OWNER
							assert(0);
#endif
							skip
						:: else
						fi;
						WoS = 1; Wacted = 1; act = 1
					fi;
					WhS = 0; Wkey = k; Wev = e + 1; Wdone = 0; WiD = 0; WU = 0
				fi;
				WQ = 0;
#ifdef FIX_STANDBY_MARK
				if
				:: Wowner == tag(c) && wmd && !rls -> DECLARE_MARK(j, e); printf("MSC: e%d conn %d: standby mark of e%d declared\n", e, c, Wmev)
				:: else
				fi;
				if
				:: plan != P_C1 || Wowner == tag(c) && wmd -> WM = 0; Wmev = 0
				:: else
				fi;
#endif
				wmd = 0;
				/* the mark is the heir's: cleared with it */
				if
				:: Wheir == 0 -> WU = 0
				:: else
				fi;
				if
				:: !WU -> Wuev = 0
				:: else
				fi;
				/* storeOwnerEvents, in the same call (no other call can read it
				 * before this one returns) */
				if
				:: Wowner == tag(c) || (plan == P_C2 && !act && Wowner != 0) -> maskTag = Wowner
				:: else
				fi;
				sgv[c] = 0;   /* decide returns no sighting */
				shand[c] = 0;
#ifdef NO_HANDED
				hov = 0;
#endif
				if
				:: hov ->
					/* but a handover's: the heir, called after it for
					 * this event, marks the word (rule 4 at its next call
					 * if not: sighting.handed) */
					sgv[c] = 1; sfirst[c] = 1; shand[c] = 1; sown[c] = Wowner; skey[c] = k; scnt[c] = evcount; sev[c] = e; hov = 0
				:: else
				fi;
				CALLED(c);
				printf("MSC: e%d k%d conn %d plan %d act %d -> owner %d heir %d key %d oS %d hS %d acted %d done %d inDoubt %d events %d\n", e, k, c, plan, act, Wowner, Wheir, Wkey, WoS, WhS, Wacted, Wdone, WiD, evcount);
				break
			fi
		   }
		od;
		plan = 0; snap = 0; isO = 0; isH = 0; seen = 0; ev0 = 0; rls = 0; r4h = 0;
		if
		:: act ->
			atomic { acts[e]++; assert(acts[e] <= 1 || (ALOV && (decl[e] & 1))) }
			/* the author's handler runs here; then: done (Dir.finish) */
			if
#ifdef ABANDON
			:: FAULTOK ->
				/* the runtime gives up on it inside its handler (request
				 * timeout, stuck, killed): it closes the connection and goes
				 * on; the handler may still finish later (Late) */
				atomic { closed[c] = 1; lateC = c; lateK = k; faults++; printf("MSC: e%d conn %d abandoned inside its handler (dropped)\n", e, c) }
#endif
			:: atomic {
				if
				:: Wowner == tag(c) && Wkey == k && Wacted && !Wdone -> Wdone = 1; WQ = 0
				:: else
				fi
			   };
#ifdef RELEASE
				/* Coordinator.Finish, after Dir.finish: a releaser gives the
				 * register up again (releaseCut: if this instance's
				 * connection owns it and no handler is running) */
				if
				:: atomic { RLS(c) ->
					if
					:: Wowner == tag(0) && !(Wacted && !Wdone) -> Wowner = 0; WoS = 0; nrel++
					:: else
					fi;
					printf("MSC: e%d conn 0 releases again (Finish) -> owner %d heir %d\n", e, Wowner, Wheir)
				   }
				:: !RLS(c)
				fi
#endif
			fi;
			act = 0
		:: else
		fi;
#ifdef REPLACE
		/* closeRetiring: R's event closes S, unless S owns the register */
		atomic {
			if
			:: c == 2 && !closed[3] && Wowner != tag(3) -> closed[3] = 1; printf("MSC: e%d: R closes S\n", e)
			:: else
			fi
		}
#endif
		calling = NONE
	fi
}
#else
/* One request of the runtime to connection c for event e with key k. */
inline call(c, e, k) {
	if
	:: closed[c] -> calling = NONE
	:: else ->
#ifndef FIX_QUIET_BIT
		/* counted by the owner and the heir only (the others do not write) */
		atomic {
			if
			:: Wowner == tag(c) || Wheir == tag(c) -> evcount++
			:: else
			fi
		}
#endif
		/* the CAS loop: one successful CAS */
		atomic {
			act = 0;
			midspan = 1;
#ifdef FIX_QUIET_BIT
			if
			:: Wowner == tag(c) || Wheir == tag(c) -> WQ = 0
			:: else
			fi;
#endif
			if
			:: Wowner != tag(c) && Wheir != tag(c) -> skip
			:: (Wowner == tag(c) || Wheir == tag(c)) && Wkey == k && ((Wowner == tag(c) && !WoS) || (Wheir == tag(c) && !WhS)) ->
				/* case 1: second for the recorded event (or ambiguous) */
				if
				:: Wowner == tag(c) -> WoS = 1
				:: else -> WhS = 1
				fi;
				if
				:: Wacted -> skip
				:: else ->
					if
					:: Wheir == tag(c) -> PROMOTE(tag(c))
					:: else
					fi;
					Wacted = 1; act = 1
				fi
			:: else ->
				/* case 2: first for a new event */
				if
				:: Wheir == tag(c) ->
					PROMOTE(tag(c)); Wacted = 1; act = 1
				:: Wowner == tag(c) && Wheir != 0 && WhS && k != Wkey ->
					/* hand over; the new owner acts when called */
					Wowner = Wheir; Wheir = 0; WoS = 0; WhS = 0; Wacted = 0
				:: else ->
					WoS = 1; WhS = 0; Wacted = 1; act = 1
				fi;
				Wkey = k; Wdone = 0
			fi;
		}
		if
		:: act ->
			atomic { acts[e]++; assert(acts[e] <= 1) }
			/* the author's handler runs here; then: done */
			atomic {
				if
				:: Wkey == k && Wacted && Wowner == tag(c) -> Wdone = 1; WQ = 0
				:: else
				fi
			}
		:: else
		fi;
		calling = NONE
	fi
}

#endif

#define PICK(c) :: atomic { pending & (1 << c) -> pending = pending & ~(1 << c); calling = c }; call(c, e, k)

/* NOREPEAT: no event has the key of the event before it */
#ifdef NOREPEAT
#define KEYOK(x) (x != lastk)
#else
#define KEYOK(x) 1
#endif

proctype Runtime() {
	byte e = 0;
	byte k;
	byte pending;
	bit act;
#ifdef NOREPEAT
	byte lastk = 0;
#endif
#ifdef RULES
	int snap;
	byte plan, j, ev0, cc;
	bit isO, isH, seen, wmd, hov;
	bit r4h;    /* Decision.skippedHanded of rule 4's second case (R4AFTERHANDOVER) */
	byte rls;   /* caller.releaser of the call (2: not computed yet) */
#endif
	do
	:: e < NEVT ->
		atomic {
			inEvent = 1;
			if
			:: e == 0 -> k = 1   /* keys are symmetric: the first is 1 */
			:: e > 0 && e < NEV && KEYOK(1) -> k = 1
			:: e > 0 && e < NEV && KEYOK(2) -> k = 2
#if NKEY > 2
			:: e > 0 && e < NEV && KEYOK(3) -> k = 3
#endif
			:: e >= NEV -> k = NKEY + 1 + e - NEV   /* a probe: a key of its own */
			fi;
#ifdef DROP
			/* the runtime drops the owner's connection between events (frozen
			 * or killed outside its handlers): skipped for good */
			if
			:: FAULTOK && Wowner != 0 && !closed[Wowner - 1] && inchain[Wowner - 1] ->
				closed[Wowner - 1] = 1; faults++; printf("MSC: e%d: the runtime dropped owner conn %d\n", e, Wowner - 1)
			:: true
			fi;
#endif
#if defined(RULES) && defined(NEWEST)
			/* NEWEST (containerd/nri PR 281): only the newest connection
			 * in the chain that is not closed is called; the older ones
			 * are shadowed, and one of them is called again, without any
			 * notice, once every newer one has closed */
			pending = 0; cc = NONE; j = 0;
			do
			:: j < NC ->
				if
				:: inchain[j] && !closed[j] && (cc == NONE || seq[j] > seq[cc]) -> cc = j
				:: else
				fi;
				j++
			:: else -> break
			od;
			if
			:: cc != NONE -> pending = 1 << cc
			:: else
			fi;
			cc = 0; j = 0
#elif defined(RULES)
			pending = (inchain[0] && !closed[0]) | ((inchain[1] && !closed[1]) << 1) | ((inchain[2] && !closed[2]) << 2) | ((inchain[3] && !closed[3]) << 3)
#else
			pending = (inchain[0] && !closed[0]) | ((inchain[1] && !closed[1]) << 1) | ((inchain[2] && !closed[2]) << 2)
#endif
		}
#ifdef RULES
		/* one call site (the verifier's code stays small) */
		do
		:: pending == 0 -> break
		:: else ->
			atomic {
#ifdef DROP_MID
				/* the runtime drops the owner between two calls of an
				 * event, its call for it still to come (frozen right then:
				 * its request for this event times out): skipped for good */
				if
				:: FAULTOK && Wowner != 0 && !closed[Wowner - 1] && inchain[Wowner - 1] && (pending & (1 << (Wowner - 1))) && midspan ->
					closed[Wowner - 1] = 1; pending = pending & ~(1 << (Wowner - 1)); faults++;
					printf("MSC: e%d: the runtime dropped owner conn %d before its call\n", e, Wowner - 1)
				:: true
				fi;
				if
				:: pending == 0 -> goto dropped_last
				:: else
				fi;
#endif
				if
#ifdef INORDER
				/* the runtime calls in the chain's order (A and S from the
				 * start, then the newcomers as appended) */
				:: pending & 1 -> cc = 0
				:: !(pending & 1) && (pending & 8) -> cc = 3
				:: !(pending & 9) && (pending & 2) -> cc = 1
				:: !(pending & 11) && (pending & 4) -> cc = 2
#elif defined(ORDER_SNA)
				/* the runtime calls S, then N1, then A (S and the
				 * newcomer at a lower index than the owner: the demo,
				 * -order alternate), then R */
				:: pending & 8 -> cc = 3
				:: !(pending & 8) && (pending & 2) -> cc = 1
				:: !(pending & 10) && (pending & 1) -> cc = 0
				:: !(pending & 11) && (pending & 4) -> cc = 2
#else
				:: pending & 1 -> cc = 0
				:: pending & 2 -> cc = 1
				:: pending & 4 -> cc = 2
				:: pending & 8 -> cc = 3
#endif
				fi;
				pending = pending & ~(1 << cc); calling = cc;
#ifdef RELEASE
				rls = 2
#endif
			}
			call(cc, e, k);
			cc = 0
		od;
#ifdef DROP_MID
dropped_last:
#endif
#else
		do
		PICK(0)
		PICK(1)
		PICK(2)
		:: pending == 0 -> break
		od;
#endif
		atomic {
#ifndef RULES
			assert(acts[e] == 1);
#endif
			inEvent = 0; midspan = 0; e++;
#ifdef RULES
			evnow = e;
#endif
#ifdef NOREPEAT
			lastk = k;
#endif
			k = 0
		}
	:: else -> break
	od;
#ifdef RULES
	/* every checked event acted on at least once unless declared (a
	 * declaration may come at a later event: the probes give it the chance);
	 * with at-least-once, an event declared in doubt is acted on; no more
	 * declarations than faults and releases */
	atomic {
		j = 0;
		do
		:: j < NEV ->
#ifndef NO_MISS_CHECK
			assert(acts[j] >= 1 || decl[j] != 0);
#endif
			assert(!ALOV || !(decl[j] & 1) || acts[j] >= 1);
			/* an event handed late reached no handler before */
			assert(!late[j] || acts[j] == 0);
#ifdef REACH_LATE
			/* a vacuity check: the late hands above are reached */
			assert(!late[j]);
#endif
#ifdef CHECK_RELEASER
			/* an orderly leave (its release succeeded, DISC_BETWEEN: it
			 * disconnects between events): the releaser acts on every
			 * event that reached nobody after its release; none is left
			 * to a standby's rule 5 to declare skipped */
			assert(!rel0 || !(decl[j] & 2));
#endif
#ifdef CHECK_PROMPT
			/* a handler that never returns: rule 3 takes over at the next
			 * call, no event is left to rule 4 */
			assert(!(decl[j] & 2));
#endif
			j++
		:: else -> break
		od;
#ifdef CHECK_DECL_BOUND
		assert(ndecl <= faults + nrel);
#endif
#ifdef CHECK_DECL_EVENTS
		/* no more events declared skipped than faults (without WINDOW:
		 * each declaration names its events; the heir's ambiguous skip,
		 * C6, declares in doubt, a false alarm a fault need not cause):
		 * a drop right after a handover costs the handed event alone,
		 * whoever takes over */
		j = 0; cc = 0;
		do
		:: j < NEV -> if :: decl[j] & 2 -> cc++ :: else fi; j++
		:: else -> break
		od;
		assert(cc <= faults);
		cc = 0;
#endif
		/* the events counter counts every recorded event once (cut-x21:
		 * counted before every CAS, a failed one counted too, and its
		 * retry took that count for an event recorded since) */
		assert(evcount == nrec);
		j = 0
	}
#endif
	finished = 1
}

/* A newcomer: Synchronize (the author's, then the claim), then success (the
 * runtime appends it later) or failure. */
proctype Newcomer(byte c; bit mayfail; bit mustfail) {
	bit fail;
	if
	:: !mustfail -> fail = 0
	:: mayfail || mustfail -> fail = 1
	fi;
	/* the claim (CAS): heir = its tag (and heirMask) */
	atomic {
		prevHeir[c] = Wheir;
		Wheir = tag(c);
#ifdef RULES
		claimed[c] = 1;
		printf("MSC: conn %d claims (heir)\n", c);
#endif
#ifdef FIX_QUIET_BIT
		WQ = 1;
#endif
#ifdef FIX_CLAIM_CLEARS_SEEN
		WhS = 0;
#endif
		/* heirUnseen is the replaced heir's (takeCutLocked clears it) */
		WU = 0;
#ifdef RULES
		Wuev = 0;
#endif
	}
#ifndef FIX_QUIET_BIT
	base[c] = evcount;
#endif
	if
	:: fail ->
		/* clear heir, only if still its tag; nothing else */
		atomic {
			if
			:: Wheir == tag(c) ->
#ifdef FIX_FAIL_RESTORES
				/* the replaced heir (even if it failed meanwhile: not seen, so harmless) */
				if
				:: prevHeir[c] != 0 -> Wheir = prevHeir[c]; WhS = 0; WQ = 0
				:: else -> Wheir = 0
				fi;
#else
				Wheir = 0;
#endif
				WU = 0   /* giveBackCut, DropConn: cleared with the heir */
#ifdef RULES
				; Wuev = 0
#endif
			:: else
			fi;
			failed[c] = 1
		}
	:: else ->
		synced[c] = 1;
#ifdef RULES
		mt[c] = 1;     /* ClaimConn returned: its instance's newest connection */
#endif
		/* the runtime appends it under its lock: never during an event */
		atomic { !inEvent -> inchain[c] = 1; appended = 1;
#if defined(RULES) && defined(NEWEST)
			seq[c] = nseq; nseq++;
#endif
			printf("MSC: conn %d appended\n", c) }
	fi
}

#ifdef RULES
/* takeCutLocked outright (not in a Synchronize), one unconditional swap
 * for connection X, whoever owns the word: the gone path of the heir's
 * PromoteWhenIdle (GONE) and the control plane's becomeOwner (CPTAKE).
 * The event the owner is inside of is in doubt (reportInDoubt); the
 * taker keeps its seen bit if it was the seen heir (C9); unseen, the
 * recorded event acted on is marked in doubt for it (rule 1 declares the
 * next event with its key; NO_CP_UNSEEN, broken, the code before: only
 * after a release; NO_GONE_SEEN, broken, older: never, ownerSeen 0); a
 * standby's mark is declared; taken from another instance's connection
 * (every other connection here: the owner, or after a release the heir,
 * which was to take over at its next call), a gap is declared since the act before
 * the last recorded one (the model: from the recorded event up to the
 * event in progress, less than the code; NO_CP_GAP, broken: none;
 * NO_CP_HEIR_GAP, broken, the code before: only from an owner). */
inline outright(X, prevO, jj, upto, idb) {
	prevO = Wowner;
	idb = Wacted && !Wdone && Wowner != 0 && !WiD;
	WiD = WiD || idb;
	if
	:: idb -> decl[Wev - 1] = decl[Wev - 1] | 1; ndecl++
	:: else
	fi;
#ifndef NO_GONE_SEEN
	WoS = (Wheir == tag(X) && WhS);
#ifndef NO_CP_UNSEEN
	WiD = WiD || (!WoS && Wacted);
#else
	WiD = WiD || (!WoS && Wacted && Wowner == 0);
#endif
#else
	WoS = 0;
#endif
#ifdef FIX_STANDBY_MARK
	if
	:: WM && Wowner != 0 -> DECLARE_MARK(jj, evnow);
		/* the taker's own mark (its last call, first and not a handed
		 * event, for this owner, nothing recorded since:
		 * cutTaken.markKey): decided at its
		 * next call (the code defers the declaration there; the model
		 * keeps it, and checks the late hand) */
		if
		:: sgv[X] && sfirst[X] && !shand[X] && sown[X] == Wowner && scnt[X] == evcount -> pm[X] = sev[X] + 1; pmk[X] = skey[X]; pmcnt[X] = evcount
		:: else
		fi
	:: else
	fi;
	WM = 0; Wmev = 0;
#endif
#ifndef NO_CP_GAP
	if
	/* from another connection that acts: the owner, or after a release
	 * the heir (it was to take over at its next call) */
#ifndef NO_CP_HEIR_GAP
	:: prevO != 0 || (Wheir != 0 && Wheir != tag(X)) ->
#else
	/* broken, the code before: only from an owner (cut-x27) */
	:: prevO != 0 ->
#endif
		if
		:: Wev > 0 -> jj = Wev - 1
		:: else -> jj = 0
		fi;
		if
		:: inEvent -> upto = evnow + 1
		:: else -> upto = evnow
		fi;
		do
		:: jj < upto -> decl[jj] = decl[jj] | 2; jj++
		:: else -> break
		od;
		ndecl++; jj = 0; upto = 0
	:: else
	fi;
#endif
	Wowner = tag(X); Wheir = 0; WhS = 0; WU = 0; Wuev = 0;
	prevO = 0; idb = 0
}
#endif

/* C6, cut-x20: PromoteWhenIdle holds off while the word marks the heir's
 * first call as the ambiguous skip (heirUnseen) and an owner holds it: the
 * next event decides (rule 2 declares it, or the owner hands over). The
 * hold is bounded (unseenHoldIntervals): then it promotes declaring that
 * event in doubt; the model has no time, so at every try it may do
 * either. NO_IDLE_UNSEEN (broken): the code before, a promotion that
 * neither holds off nor declares. */
#if defined(RULES) && !defined(NO_IDLE_UNSEEN)
#ifdef FIX_STANDBY_MARK
#define IDLE_UNSEEN(c) ((WU || WM) && Wowner != 0)
#else
#define IDLE_UNSEEN(c) (WU && Wowner != 0)
#endif
#else
#define IDLE_UNSEEN(c) 0
#endif
/* the idle rule's CAS: the word is as it read it */
#define SNAPEQ (sO == Wowner && sH == Wheir && sK == Wkey && sOS == WoS && sHS == WhS && sA == Wacted && sD == Wdone && sQ == WQ && sID == WiD && sU == WU && sM == WM)
/* The idle rule of a newcomer whose Synchronize returned. */
proctype Idle(byte c) {
	byte sO, sH, sK, cnt;
	bit sOS, sHS, sA, sD, sQ, sU, sM;
	byte jj;
	bit sID, prom;
#ifdef GONE
	byte gO, gU;
	bit gD;
#endif
#ifdef IDLE_EARLY
	synced[c] && !closed[c];
#else
	synced[c] && inchain[c] && !closed[c];
#endif
	do
	::
#ifdef IDLE_COUNTER_FIRST
		cnt = evcount;
#endif
		atomic {
#ifndef NO_T2
			!midspan ->
#endif
			sO = Wowner; sH = Wheir; sK = Wkey; sOS = WoS; sHS = WhS; sA = Wacted; sD = Wdone; sQ = WQ; sU = WU; sM = WM;
#ifdef RULES
			sID = WiD;
#endif
		}
		if
		:: sH == tag(c) && (sD || !sA) && !closed[c]
#ifdef RULES
		/* a handler in progress, or abandoned (ABANDON): try again later */
		:: sH == tag(c) && !(sD || !sA) && !closed[c] -> goto next
		:: else -> break
#else
		:: else -> break
#endif
		fi;
#ifdef FIX_QUIET_BIT
		/* quiet since the mark was set: no write of an event since */
		if
		:: sQ
		:: else ->
			/* re-arm: set the mark (CAS), wait another interval Q */
			atomic {
				if
				:: SNAPEQ -> WQ = 1
				:: else
				fi
			}
			goto next
		fi;
#else
#ifndef IDLE_COUNTER_FIRST
		cnt = evcount;
#endif
		if
		:: cnt == base[c]
		:: else ->
#ifdef FIX_IDLE_REARM
			/* a new quiet interval from now */
			base[c] = cnt; goto next
#else
			break
#endif
		fi;
#endif
		atomic {
			if
			/* held off: the next event decides */
			:: SNAPEQ && IDLE_UNSEEN(c) -> goto next
#ifdef RULES
			/* the hold's bound: promoted, that event declared in doubt */
			:: SNAPEQ && IDLE_UNSEEN(c) ->
				if
				:: WU -> decl[Wuev] = decl[Wuev] | 1; ndecl++
				:: else
				fi;
#ifdef FIX_STANDBY_MARK
				if
				:: WM -> DECLARE_MARK(jj, evnow)
				:: else
				fi;
				Wmev = 0;
#endif
				printf("MSC: conn %d: idle after its unseen first call (e%d): declared\n", c, Wuev);
				Wuev = 0;
				PROMOTE(tag(c));
				prom = 1;
				printf("MSC: conn %d promotes itself (idle, held off)\n", c);
				break
#endif
			:: SNAPEQ && !IDLE_UNSEEN(c) ->
				PROMOTE(tag(c));
#ifdef RULES
				prom = 1;
				printf("MSC: conn %d promotes itself (idle)\n", c);
#endif
#ifdef IDLE_OS0
				WoS = 0;
#endif
				break
			:: else   /* CAS failed: again */
			fi
		}
next:		skip
#ifdef GONE
	/* PromoteWhenIdle's other way: its predecessor is gone (the owner is
	 * 0: released), checked at every tick, in or out of an event: it takes
	 * the register outright (takeCutLocked, not in a Synchronize: an
	 * unconditional swap, from whoever owns it by then: outright) */
	:: atomic { Wheir == tag(c) && Wowner == 0 && !closed[c] }
		atomic {
			if
			:: Wowner != tag(c) -> outright(c, gO, jj, gU, gD)
			:: else
			fi;
			printf("MSC: conn %d takes the register outright (gone) -> owner %d oS %d key %d acted %d done %d inDoubt %d\n", c, Wowner, WoS, Wkey, Wacted, Wdone, WiD)
		}
		prom = 1;
		break
#endif
	od;
#ifdef RULES
	/* setOwnerEvents, after the swap */
	if
	:: prom -> maskTag = tag(c)
	:: else
	fi
#endif
}

#if defined(CLOSE) || defined(LEAVE_TIMEOUT)
/* A connection closes (it is skipped thereafter), never while a request to
 * it is in flight: connection 0 once it is neither owner nor heir, or
 * (LEAVE_TIMEOUT) when its leave timeout expires. */
proctype Close(byte c) {
	atomic {
		calling != c && !closed[c] && (
#ifdef CLOSE
		(Wowner != tag(c) && Wheir != tag(c))
#else
		0
#endif
#ifdef LEAVE_TIMEOUT
		|| (c == 0 && appended)
#endif
		) -> closed[c] = 1; printf("MSC: conn %d closes\n", c)
	}
}
#endif

#ifdef ABANDON
/* The handler of a connection the runtime gave up on runs on: it finishes
 * (Dir.finish, a CAS that writes done only if the word still shows it
 * acting on its event) at any later moment, or never (killed). */
proctype Late() {
	lateC != NONE;
#ifndef NO_LATE
	if
	:: atomic {
		if
		:: Wowner == tag(lateC) && Wkey == lateK && Wacted && !Wdone -> Wdone = 1; WQ = 0
		:: else
		fi;
		printf("MSC: late finish of conn %d\n", lateC)
	   }
	:: skip
	fi
#endif
}
#endif

#ifdef RELEASE
/* Connection 0's instance leaves (Coordinator.Leave) with its successor
 * not seen in time: releaseCut (a CAS: if it owns the register and is not
 * inside a handler, owner = 0, ownerSeen = 0; then releasedTag: rel0),
 * then "left" (its connection no longer takes over, except as a releaser:
 * holdEvents waits for no event of it in progress),
 * then it disconnects. Timing assumption (docs/model.md C4): the leave
 * timeout is long enough for the runtime to append an heir whose
 * Synchronize returned, and no newcomer claims after the release
 * (RELEASE_EARLY drops it). */
proctype Leave0() {
	atomic {
		!closed[0] &&
#ifndef RELEASE_EARLY
		(Wheir == 0 && (claimed[1] || !HAVE_N1) || Wheir != 0 && inchain[Wheir - 1]) &&
#endif
		1 ->
		if
		:: Wowner == tag(0) && !(Wacted && !Wdone) -> Wowner = 0; WoS = 0; nrel++; rel0 = 1
		/* refused inside a handler: it leaves as owner (a declared miss may follow) */
		:: Wowner == tag(0) && Wacted && !Wdone -> nrel++
		:: else
		fi;
		printf("MSC: conn 0 leaves: releaseCut -> owner %d heir %d\n", Wowner, Wheir)
	}
	atomic { calling != 0 -> mt[0] = 0; printf("MSC: conn 0 left\n") }
	/* disconnecting while owner (it took the register back, rule 5): a
	 * declared miss may follow, as after a refused release;
	 * DISC_BETWEEN: it disconnects only between events (not between
	 * the runtime's calls of one event) */
	atomic { calling != 0 &&
#ifdef DISC_BETWEEN
		!inEvent &&
#endif
		1 -> closed[0] = 1; if :: Wowner == tag(0) -> nrel++ :: else fi; printf("MSC: conn 0 disconnects\n") }
}
#endif

#ifdef CPTAKE
/* CPTAKE: the control plane moves the register at any moment (findings F4,
 * F8, F9 of handover.pml; docs/model.md "The control plane under the
 * cut"). Coordinator.becomeOwner outside a Synchronize (a take-back, a
 * promotion, ownAfterOverrun, a stalled claim that resumes after its
 * ClaimConn returned: claimTag 0) calls takeCutLocked(false) for its
 * instance's newest connection (mainTag): one unconditional swap of the
 * word, whoever owns it, in or out of an event, with no check of what the
 * control plane believed when it decided. What the swap does
 * (takeCutLocked's default branch): the recorded event in doubt if the
 * owner is inside its handler; the taker keeps its sighting if it was the
 * heir and seen (C9), unseen after a release the recorded event is in
 * doubt; a standby's mark (unrecorded) is declared; the register taken
 * from another instance's connection declares a gap since the act before
 * the last recorded one (reportInDoubt: "gap: no instance acted since";
 * the model declares from the recorded event up to the event in
 * progress, i.e. less than the code); a register released with no heir
 * is left as it is (rule 5 gives it to the first connection that may
 * take over). Which connections (CPMASK): 1 A
 * (the old owner's stale take-back, F8/F9), 8 S (a live standby's
 * instance promoted, or a stalled claim of a reconnected instance that
 * resumes: F4), 2 N1 once its Synchronize returned; each only while it is
 * in the chain and its instance's newest connection (mt: a connection
 * the runtime has not appended is T1's business, a left instance does
 * not take: becomeOwner's hasLeft). At most MAXCP swaps. NO_CP_GAP
 * (broken): no gap declaration. */
#ifndef MAXCP
#define MAXCP 1
#endif
#ifndef CPMASK
#define CPMASK 9
#endif
byte ncp = 0;
/* takeCutLocked leaves a released register with no heir to rule 5
 * (NO_CP_RULE5, broken, the code before: taken; cut-x28) */
#ifdef NO_CP_RULE5
#define CPREL 1
#else
#define CPREL (Wowner != 0 || Wheir != 0)
#endif
#define CPOK(x) (ncp < MAXCP && (CPMASK & (1 << x)) && inchain[x] && !closed[x] && mt[x] && Wowner != tag(x) && CPREL)
proctype CP() {
	byte c, jj, prevO, upto;
	bit indoubt;
	do
	:: atomic {
		if
		:: CPOK(0) -> c = 0
		:: CPOK(1) -> c = 1
		:: CPOK(3) -> c = 3
		fi;
		outright(c, prevO, jj, upto, indoubt);
		/* setOwnerEvents (FIX_MASK: the mask does not matter) */
		maskTag = tag(c);
		ncp++;
		printf("MSC: control plane: conn %d takes the register outright -> oS %d key %d acted %d done %d inDoubt %d\n", c, WoS, Wkey, Wacted, Wdone, WiD)
	   }
	:: ncp >= MAXCP -> break
	od
}
#endif

#if defined(RULES) && defined(REPLACE)
/* REPLACE (C12): S's instance replaces S's connection (conn 3) with R
 * (conn 2; no N2): a catch-up after a promotion, or a take-back, whose
 * instance has yielded meanwhile, so R does not claim the register. R's
 * Synchronize returns (ClaimConn: the instance's newest connection), then
 * the runtime appends it (never during an event); S stays in the chain
 * until R's first event (closeRetiring, in call). As the code has it, the
 * right to take over (mayTakeOver) moves to R at its first call
 * (Coordinator.takerLocked); NO_MT_AT_CALL (broken, the code before): when
 * its Synchronize returns (ClaimConn sets mainTag), before the append. */
proctype Replace() {
	atomic {
		synced[2] = 1;
#ifdef NO_MT_AT_CALL
		mt[2] = 1; mt[3] = 0;
#endif
		printf("MSC: R synchronized\n")
	}
	atomic { !inEvent -> inchain[2] = 1; printf("MSC: R appended\n") }
}
#endif

#ifdef CHECK_HEIR
/* At the end: a newcomer whose Synchronize succeeded is owner or heir
 * unless a later newcomer succeeded too (a failed one changes nothing). */
proctype Final() {
	finished && (synced[1] || failed[1]) && (synced[2] || failed[2]);
	assert(!(synced[1] && failed[2]) || Wowner == tag(1) || Wheir == tag(1))
}
#endif

init {
	atomic {
		inchain[0] = 1;
#ifdef RULES
#ifndef NO_MT0
		mt[0] = 1;   /* the old owner: its instance's newest connection, until it leaves */
#endif
#ifdef STANDBY
		inchain[3] = 1; mt[3] = 1;   /* a live standby's connection */
#endif
#ifdef NEWEST
		seq[0] = 1;
#ifdef SNEWER
		seq[3] = 2;
#endif
#endif
#ifdef ABANDON
		run Late();
#endif
#ifdef RELEASE
		run Leave0();
#endif
#endif
		run Runtime();
#ifndef NO_N1
		run Newcomer(1,
#ifdef FAIL1
			1,
#else
			0,
#endif
			0);
#ifndef NO_IDLE
		run Idle(1);
#endif
#endif
#ifdef N2
		run Newcomer(2, N2FAIL == 2, N2FAIL == 1);
#ifndef NO_IDLE
		run Idle(2);
#endif
#endif
#if defined(CLOSE) || defined(LEAVE_TIMEOUT)
		run Close(0);
#endif
#ifdef CHECK_HEIR
		run Final();
#endif
#ifdef CPTAKE
		run CP();
#endif
#if defined(RULES) && defined(REPLACE)
		run Replace();
#endif
	}
}

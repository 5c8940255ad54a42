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
#define NC 3
#define NONE 255

/* the register (owner.gen) */
byte Wowner = 1;
byte Wheir = 0;
byte Wkey = 0;
bit WoS = 0;
bit WhS = 0;
bit Wacted = 0;
bit Wdone = 0;
bit WQ = 0;        /* FIX_QUIET_BIT: the heir's quiet mark, cleared by every write of an event */
/* beside it: the events counter */
byte evcount = 0;

/* runtime side */
bit inchain[NC];
bit closed[NC];
bit inEvent = 0;
byte calling = NONE;
bit midspan = 0;       /* T2: some of the event's connections were called, others are pending */   /* the connection a request is in flight to */
byte acts[NEV];        /* how many connections acted on event e */

/* connection side */
bit synced[NC];        /* its Synchronize returned successfully */
bit failed[NC];        /* its Synchronize failed (never appended) */
byte base[NC];         /* the counter when it claimed */
byte prevHeir[NC];     /* FIX_FAIL_RESTORES: the heir its claim replaced */
bit appended = 0;
bit finished = 0;      /* the runtime delivered every event */      /* some newcomer is in the chain (LEAVE_TIMEOUT) */

#define tag(c) (c + 1)

/* promote connection X (the heir) to owner */
#define PROMOTE(X) Wowner = X; Wheir = 0; WoS = 1; WhS = 0

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

#define PICK(c) :: atomic { pending & (1 << c) -> pending = pending & ~(1 << c); calling = c }; call(c, e, k)

proctype Runtime() {
	byte e = 0;
	byte k;
	byte pending;
	bit act;
	do
	:: e < NEV ->
		atomic {
			inEvent = 1;
			if
			:: e == 0 -> k = 1   /* keys are symmetric: the first is 1 */
			:: e > 0 -> k = 1
			:: e > 0 -> k = 2
#if NKEY > 2
			:: e > 0 -> k = 3
#endif
			fi;
			pending = (inchain[0] && !closed[0]) | ((inchain[1] && !closed[1]) << 1) | ((inchain[2] && !closed[2]) << 2)
		}
		do
		PICK(0)
		PICK(1)
		PICK(2)
		:: pending == 0 -> break
		od;
		atomic {
			assert(acts[e] == 1);
			inEvent = 0; midspan = 0; e++; k = 0
		}
	:: else -> break
	od;
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
#ifdef FIX_QUIET_BIT
		WQ = 1;
#endif
#ifdef FIX_CLAIM_CLEARS_SEEN
		WhS = 0;
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
				fi
#else
				Wheir = 0
#endif
			:: else
			fi;
			failed[c] = 1
		}
	:: else ->
		synced[c] = 1;
		/* the runtime appends it under its lock: never during an event */
		atomic { !inEvent -> inchain[c] = 1; appended = 1 }
	fi
}

/* The idle rule of a newcomer whose Synchronize returned. */
proctype Idle(byte c) {
	byte sO, sH, sK, cnt;
	bit sOS, sHS, sA, sD, sQ;
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
			sO = Wowner; sH = Wheir; sK = Wkey; sOS = WoS; sHS = WhS; sA = Wacted; sD = Wdone; sQ = WQ }
		if
		:: sH == tag(c) && (sD || !sA) && !closed[c]
		:: else -> break
		fi;
#ifdef FIX_QUIET_BIT
		/* quiet since the mark was set: no write of an event since */
		if
		:: sQ
		:: else ->
			/* re-arm: set the mark (CAS), wait another interval Q */
			atomic {
				if
				:: sO == Wowner && sH == Wheir && sK == Wkey && sOS == WoS && sHS == WhS && sA == Wacted && sD == Wdone && sQ == WQ -> WQ = 1
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
			:: sO == Wowner && sH == Wheir && sK == Wkey && sOS == WoS && sHS == WhS && sA == Wacted && sD == Wdone && sQ == WQ ->
				PROMOTE(tag(c));
#ifdef IDLE_OS0
				WoS = 0;
#endif
				break
			:: else   /* CAS failed: again */
			fi
		}
next:		skip
	od
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
		) -> closed[c] = 1
	}
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
		run Runtime();
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
	}
}

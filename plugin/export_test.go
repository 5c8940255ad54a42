package plugin

import "time"

// SetReconnectMin sets the first step of the reconnect backoff until the
// returned function restores it (for this package's external tests).
func SetReconnectMin(d time.Duration) (restore func()) {
	prev := reconnectMin
	reconnectMin = d
	return func() { reconnectMin = prev }
}

// SetRecordSlots sets the size of a new lifecycle record until the
// returned function restores it.
func SetRecordSlots(n int) (restore func()) {
	prev := recordSlots
	recordSlots = n
	return func() { recordSlots = prev }
}

// setSettleDelay sets settleDelay for a test; it returns the restore.
func setSettleDelay(d time.Duration) func() {
	prev := settleDelay
	settleDelay = d
	return func() { settleDelay = prev }
}

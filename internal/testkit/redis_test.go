package testkit

import "testing"

func TestPrivateRedisStopStart(t *testing.T) {
	r := PrivateRedis(t)
	if !redisPing(r.Addr) {
		t.Fatal("no PONG after start")
	}
	r.Stop()
	if redisPing(r.Addr) {
		t.Fatal("PONG after Stop")
	}
	r.Start()
	if !redisPing(r.Addr) {
		t.Fatal("no PONG after Start again")
	}
}

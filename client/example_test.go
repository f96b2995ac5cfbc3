package client_test

import (
	"context"
	"log"
	"time"

	"github.com/inlet-dev/inlet/client"
)

func Example() {
	c, err := client.New("http://127.0.0.1:8080",
		client.WithBearer("my-write-key"),
		client.WithFullPolicy(client.Block(10*time.Millisecond)))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil { // sends what is queued
			log.Print(err)
		}
	}()
	err = c.Track(context.Background(), client.Event{Event: "signup", UID: "u1", Props: map[string]any{"plan": "pro"}})
	if err != nil {
		log.Print(err) // client.ErrQueueFull: counted in c.Stats().Dropped
	}
}

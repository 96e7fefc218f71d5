package amqp

//go:generate go run ./internal/gen -spec spec/amqp0-9-1.extended.xml -out wire -reply ../internal/replycode

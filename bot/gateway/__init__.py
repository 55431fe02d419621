"""The gateway process: adapters in, ingress (commands, turns), egress and progress out."""

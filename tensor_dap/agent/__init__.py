"""The agent: everything that runs inside the debuggee.

It imports nothing from the adapter or the language server, so that loading it into a user's
process pulls in torch and the standard library only.
"""

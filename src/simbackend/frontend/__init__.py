"""The parts of the front end (:class:`simbackend.contract.SimBackend`) that are not its public API.

One job each: name and column tables (:mod:`.names`), the per-env time,
controls and pending forces the front end keeps (:mod:`.bookkeeping`), input
checks a GPU backend defers to the next call (:mod:`.faults`), and the one
guard of a closed backend (:mod:`.guard`). Nothing here touches an engine.
"""

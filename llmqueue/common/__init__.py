"""Shared ground floor: input validation and units (time in ticks, unlimited
limits, ceiling division).  Every other subpackage may import it; it imports
no other part of llmqueue."""

"""What a merged export's card says of its members."""

os.execute('true') return {}
